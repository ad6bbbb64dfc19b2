//! The only code that speaks to Daytona: the control-plane API ([`client`]), each sandbox's
//! toolbox ([`toolbox`]), the log WebSocket ([`ws`]) and the SSH gateway ([`ssh`]), one function
//! per endpoint. Everything above this module works with their answers.

pub(crate) mod client;
pub(crate) mod ssh;
pub(crate) mod toolbox;
pub(crate) mod ws;
