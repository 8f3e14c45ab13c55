//! The accounts' own routes: logging in and out (a password or the OpenID provider's round
//! trip), signing up, and an account's tokens. What they ask of accounts lives in
//! `crate::accounts`; these take the request and the services.

pub mod callback;
pub mod login;
pub mod session;
pub mod tokens;
