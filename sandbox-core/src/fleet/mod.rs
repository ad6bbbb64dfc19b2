//! Fleet and cost: who owns a sandbox, reaping the ones nobody needs, what shapes cost, and
//! what a sandbox has used.
//!
//! - [`Owner`]: the owner label every sandbox made through a client with
//!   [`ClientBuilder::owner`](crate::client::ClientBuilder::owner) carries, and the list filter
//!   that scopes a listing to them;
//! - [`reap`] with a [`ReapPolicy`]: destroys this owner's sandboxes that are too old, idle,
//!   failed, stopped too long or not in a keep-set, with a dry run and a [`ReapReport`]; it
//!   never touches a sandbox without the owner's label;
//! - [`PriceTable`], [`Shape`], [`shapes`]: per-provider prices shipped as data with their
//!   as-of date and source, overridable, and [`Prices::rate`] / [`Prices::held`] per hour;
//! - [`Usage`]: what a sandbox ran and cost ([`Provider::usage`](crate::Provider::usage)),
//!   metered by the provider or [`estimate`]d and marked so;
//! - [`PrepareSpec`] / [`Prepared`]: a template or snapshot of a shape, an image and build
//!   steps, found again by content hash ([`Provider::prepare`](crate::Provider::prepare)),
//!   with the find-or-build policy every adapter shares ([`find_or_build`] over [`Builds`]).

mod owner;
mod prepare;
mod prices;
mod reap;
mod usage;

pub use owner::{DEFAULT_PREFIX, Owner};
pub use prepare::{
    Builds, Found, PrepareSpec, Prepared, content_hash, content_name, find_or_build,
};
pub use prices::{
    BUILTIN_PRICES, HOURS_PER_MONTH, LADDER, PriceTable, Prices, Shape, ShapeLimits, ShapeOffer,
    cost_markdown, dollars, shapes,
};
pub use reap::{
    DEFAULT_CONCURRENCY, Doomed, ReapFailure, ReapPolicy, ReapReason, ReapReport, SkipReason,
    Skipped, reap,
};
pub use usage::{Usage, estimate};
