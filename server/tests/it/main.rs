//! Parlor's integration tests, in one binary so the server is linked once: the chat API and
//! pages over real HTTP, history settings against a real upstream, the stores (Redis included),
//! `!` commands, and the real `parlor` binary started as a process.

mod support;

mod accounts;
mod chat_api;
mod commands;
mod context;
mod conversations;
mod faults;
mod gate;
mod history;
mod marks;
mod mcp;
mod meter;
mod pages;
mod paging;
mod processes;
mod providers;
mod startup;
mod storage;
mod summary;
mod tools;
