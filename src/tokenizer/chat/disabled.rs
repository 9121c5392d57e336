//! Stand-in without the `chat-template` feature: `compile` fails, so no value ever exists.

use super::RenderArgs;
use crate::error::{Error, Result};

pub(super) enum Renderer {}

impl Renderer {
    pub(super) fn compile(_source: &str) -> Result<Renderer> {
        Err(Error::Unsupported { what: "chat templates (this build lacks the `chat-template` feature)".into() })
    }

    pub(super) fn at_time(self, _secs: i64) -> Renderer {
        match self {}
    }

    pub(super) fn render(&self, _args: &RenderArgs<'_>) -> Result<String> {
        match *self {}
    }
}
