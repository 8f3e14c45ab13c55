//! Tools: the MCP servers an operator declares (spec `tools.md`), Parlor as their client.

pub mod spec;
