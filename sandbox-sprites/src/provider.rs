//! [`SpritesProvider`]: creates, finds and lists the sprites of one organisation.

use crate::api::Api;
use crate::capabilities::CAPABILITIES;
use crate::config::{PROVIDER, Settings};
use crate::lifecycle::create::{self, SpritesCreate};
use crate::lifecycle::{self, Handle};
use crate::sandbox::SpritesSandbox;
use async_trait::async_trait;
use sandbox_sdk_core::{
    Capabilities, CreateSpec, ListFilter, Provider, Result, Sandbox, SandboxInfo, SandboxStream,
};

/// The Sprites provider of one organisation (the token's). Build it with
/// [`SpritesProvider::builder`] or [`crate::SpritesBuilder::from_env`].
#[derive(Debug, Clone)]
pub struct SpritesProvider {
    api: Api,
}

impl SpritesProvider {
    pub(crate) fn new(settings: Settings) -> Result<SpritesProvider> {
        Ok(SpritesProvider {
            api: Api::new(settings)?,
        })
    }

    /// Creates a sprite with Sprites' own options ([`SpritesCreate`]). Sent once; no
    /// idempotency key applies.
    pub async fn create_sprite(&self, options: &SpritesCreate) -> Result<SpritesSandbox> {
        let sprite = create::create(&self.api, options, None).await?;
        Ok(SpritesSandbox::new(Handle::new(self.api.clone(), sprite)))
    }

    /// Connects to the sprite named `name` (reading it does not wake it).
    pub async fn connect_sprite(&self, name: &str) -> Result<SpritesSandbox> {
        Ok(SpritesSandbox::new(
            lifecycle::connect(&self.api, name).await?,
        ))
    }
}

#[async_trait]
impl Provider for SpritesProvider {
    fn name(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    /// Creates a sprite from a core spec ([`SpritesCreate::from_spec`]); with an idempotency
    /// key, at most once (see "Idempotent create" in the crate README). The sprite comes back
    /// `cold` and wakes on its first command.
    async fn create(&self, spec: &CreateSpec) -> Result<Box<dyn Sandbox>> {
        let options = SpritesCreate::from_spec(spec);
        let sprite = create::create(&self.api, &options, Some(spec)).await?;
        Ok(Box::new(SpritesSandbox::new(Handle::new(
            self.api.clone(),
            sprite,
        ))))
    }

    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        Ok(Box::new(self.connect_sprite(id).await?))
    }

    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        lifecycle::list(&self.api, filter)
    }

    /// Deletes the sprite by name, with its sessions and checkpoints (PROTOCOL.md §4.3).
    async fn destroy(&self, id: &str) -> Result<()> {
        self.api.delete(id).await
    }

    /// The sprite named after `key` ([`create::idempotency_name`]).
    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>> {
        create::find_keyed(&self.api, key).await
    }
}
