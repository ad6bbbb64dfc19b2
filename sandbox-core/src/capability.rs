//! What a provider can do: one flat [`Capabilities`] literal per provider, checked by the client
//! before any adapter code runs and proven by the conformance suite.

use serde::Serialize;
use std::fmt;

/// How a provider offers a capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// The provider's own API does it.
    Native,
    /// The SDK builds it from other operations (for example files over exec); results say so.
    Emulated,
    /// Not available: the call fails with `NotSupported` and nothing is sent.
    #[default]
    Unsupported,
}

impl Level {
    /// Native or emulated.
    pub fn is_available(self) -> bool {
        self != Level::Unsupported
    }

    /// The level's name as written in tables (`native`, `emulated`, `unsupported`).
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Native => "native",
            Level::Emulated => "emulated",
            Level::Unsupported => "unsupported",
        }
    }
}

/// How a provider exposes a sandbox port to the outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PreviewModel {
    /// A per-port, per-sandbox subdomain (`{port}-{id}.domain`).
    Subdomain,
    /// A tunnel opened on demand.
    Tunnel,
    /// Only ports declared at create time are reachable.
    DeclaredPorts,
    /// A wildcard DNS name per app.
    WildcardDns,
    /// A public IP address.
    Ip,
    /// A port on this machine's loopback interface.
    Localhost,
    /// No preview links.
    #[default]
    None,
}

/// Behavioural flags: not features present or absent, but how the features behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Flags {
    /// Pausing keeps the memory of running processes.
    pub preserves_memory_on_pause: bool,
    /// Stopping keeps the filesystem.
    pub preserves_disk_on_stop: bool,
    /// The provider takes cwd and env per command; when false the client folds them into `sh -c`.
    pub per_command_env_cwd: bool,
    /// The provider reports exit codes; when false the client reads them from an output marker.
    pub exit_code_native: bool,
    /// How ports are exposed.
    pub preview_model: PreviewModel,
}

impl Flags {
    /// Flags of a provider that does nothing special: env/cwd and exit codes native, nothing kept.
    pub const DEFAULT: Flags = Flags {
        preserves_memory_on_pause: false,
        preserves_disk_on_stop: false,
        per_command_env_cwd: true,
        exit_code_native: true,
        preview_model: PreviewModel::None,
    };
}

impl Default for Flags {
    fn default() -> Self {
        Flags::DEFAULT
    }
}

macro_rules! capabilities {
    ($( $(#[$doc:meta])* $field:ident => $variant:ident ),* $(,)?) => {
        /// Every capability a provider may offer; one field per [`Capability`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
        pub struct Capabilities {
            $( $(#[$doc])* pub $field: Level, )*
            /// Behavioural flags.
            pub flags: Flags,
        }

        /// The name of one capability, for gating and for tables.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(rename_all = "snake_case")]
        pub enum Capability {
            $( $(#[$doc])* $variant, )*
        }

        impl Capability {
            /// Every capability, in table order.
            pub const ALL: &'static [Capability] = &[ $( Capability::$variant, )* ];

            /// The capability's snake_case name, as in JSON and tables.
            pub fn as_str(self) -> &'static str {
                match self { $( Capability::$variant => stringify!($field), )* }
            }
        }

        impl Capabilities {
            /// Everything unsupported with default flags: a base for literals.
            pub const NONE: Capabilities = Capabilities {
                $( $field: Level::Unsupported, )*
                flags: Flags::DEFAULT,
            };

            /// The level of one capability.
            pub fn level(&self, capability: Capability) -> Level {
                match capability { $( Capability::$variant => self.$field, )* }
            }

            /// Sets the level of one capability.
            pub fn set(&mut self, capability: Capability, level: Level) {
                match capability { $( Capability::$variant => self.$field = level, )* }
            }
        }
    };
}

capabilities! {
    /// Listing sandboxes.
    list => List,
    /// Stopping a sandbox and starting it again.
    stop => Stop,
    /// Pausing and resuming a sandbox.
    pause => Pause,
    /// Changing a running sandbox's time to live.
    set_timeout => SetTimeout,
    /// Background processes that outlive the call, can be listed, reattached and killed.
    background => Background,
    /// Live output while a command runs (not buffered until exit).
    streaming => Streaming,
    /// Killing a running process.
    kill_process => KillProcess,
    /// Pseudo-terminals.
    pty => Pty,
    /// Writing to a process's stdin.
    stdin => Stdin,
    /// Watching a directory for changes.
    files_watch => FilesWatch,
    /// Reading and writing files.
    files_upload => FilesUpload,
    /// Running code cells in a language kernel.
    code_interpreter => CodeInterpreter,
    /// A kernel that keeps state between cells.
    stateful_kernel => StatefulKernel,
    /// Reaching a sandbox port from outside (preview links).
    expose_port => ExposePort,
    /// Preview links that require a token.
    private_preview => PrivatePreview,
    /// Restricting outbound network traffic.
    egress_control => EgressControl,
    /// SSH access.
    ssh => Ssh,
    /// HTTP requests proxied through the sandbox.
    proxied_fetch => ProxiedFetch,
    /// Snapshots of a sandbox.
    snapshot => Snapshot,
    /// Forking a running sandbox.
    fork => Fork,
    /// Persistent volumes.
    volumes => Volumes,
    /// GPUs.
    gpu => Gpu,
    /// Choosing the region.
    region => Region,
    /// Secrets stored by the provider.
    secrets_vault => SecretsVault,
    /// Resource metrics of a running sandbox.
    metrics => Metrics,
    /// Usage, limits and cost.
    usage => Usage,
    /// Preparing a reusable template or snapshot from an image and build steps, found again by
    /// content hash.
    prepare => Prepare,
}

impl Default for Capabilities {
    fn default() -> Self {
        Capabilities::NONE
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Capabilities {
    /// The capabilities that are native or emulated.
    pub fn available(&self) -> impl Iterator<Item = Capability> + '_ {
        Capability::ALL
            .iter()
            .copied()
            .filter(|c| self.level(*c).is_available())
    }

    /// The map as JSON: `{"list": "native", ..., "flags": {...}}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// Renders providers' capability maps side by side as JSON: `{"provider": {...}}`, in the given order.
pub fn matrix_json(providers: &[(&str, Capabilities)]) -> serde_json::Value {
    let map: serde_json::Map<String, serde_json::Value> = providers
        .iter()
        .map(|(name, caps)| ((*name).to_owned(), caps.to_json()))
        .collect();
    serde_json::Value::Object(map)
}

/// Renders providers' capability maps side by side as a Markdown table, one row per capability
/// and flag, one column per provider.
pub fn matrix_markdown(providers: &[(&str, Capabilities)]) -> String {
    let mut out = String::from("| capability |");
    for (name, _) in providers {
        out.push_str(&format!(" {name} |"));
    }
    out.push_str("\n| --- |");
    for _ in providers {
        out.push_str(" --- |");
    }
    out.push('\n');
    for cap in Capability::ALL {
        out.push_str(&format!("| {cap} |"));
        for (_, caps) in providers {
            out.push_str(&format!(" {} |", caps.level(*cap).as_str()));
        }
        out.push('\n');
    }
    type RenderFlag = fn(&Flags) -> String;
    let flag_rows: [(&str, RenderFlag); 5] = [
        ("preserves_memory_on_pause", |f| {
            f.preserves_memory_on_pause.to_string()
        }),
        ("preserves_disk_on_stop", |f| {
            f.preserves_disk_on_stop.to_string()
        }),
        ("per_command_env_cwd", |f| f.per_command_env_cwd.to_string()),
        ("exit_code_native", |f| f.exit_code_native.to_string()),
        ("preview_model", |f| {
            serde_json::to_value(f.preview_model)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        }),
    ];
    for (name, render) in flag_rows {
        out.push_str(&format!("| *{name}* |"));
        for (_, caps) in providers {
            out.push_str(&format!(" {} |", render(&caps.flags)));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_capability_round_trips_through_level_and_set() {
        let mut caps = Capabilities::NONE;
        for cap in Capability::ALL {
            assert_eq!(caps.level(*cap), Level::Unsupported);
            caps.set(*cap, Level::Emulated);
            assert_eq!(caps.level(*cap), Level::Emulated);
        }
        assert_eq!(caps.available().count(), Capability::ALL.len());
    }

    #[test]
    fn json_names_every_capability_and_flag() {
        let json = Capabilities::NONE.to_json();
        for cap in Capability::ALL {
            assert_eq!(json[cap.as_str()], "unsupported", "{cap}");
        }
        assert_eq!(json["flags"]["preview_model"], "none");
        assert_eq!(json["flags"]["exit_code_native"], true);
    }

    #[test]
    fn markdown_has_a_row_per_capability_and_flag() {
        let mut a = Capabilities::NONE;
        a.list = Level::Native;
        let table = matrix_markdown(&[("a", a), ("b", Capabilities::NONE)]);
        assert!(table.starts_with("| capability | a | b |\n| --- | --- | --- |\n"));
        assert!(table.contains("| list | native | unsupported |"));
        assert!(table.contains("| *preview_model* | none | none |"));
        assert_eq!(table.lines().count(), 2 + Capability::ALL.len() + 5);
    }
}
