//! Who may use Parlor (`PARLOR_AUTH` and the variables of each mode), read and checked at
//! startup: a mode's missing variable is an error naming it.

use super::ApiKey;
use parlor_domain::account::UserName;

/// `PARLOR_AUTH`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthMode {
    /// Anyone who reaches Parlor; a browser cookie owns conversations.
    None,
    /// Accounts made with `parlor user add`, or by sign-up when allowed.
    Local,
    /// Accounts from one OpenID Connect provider.
    Oidc,
    /// The user a trusted reverse proxy names in a header.
    Proxy,
}

impl AuthMode {
    pub const ALLOWED: &'static str = "none, local, oidc, proxy";

    pub fn parse(value: &str) -> Result<AuthMode, String> {
        match value {
            "none" => Ok(AuthMode::None),
            "local" => Ok(AuthMode::Local),
            "oidc" => Ok(AuthMode::Oidc),
            "proxy" => Ok(AuthMode::Proxy),
            _ => Err(format!("allowed values: {}", Self::ALLOWED)),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            AuthMode::None => "none",
            AuthMode::Local => "local",
            AuthMode::Oidc => "oidc",
            AuthMode::Proxy => "proxy",
        }
    }
}

/// One OpenID Connect provider.
#[derive(Clone, Debug)]
pub struct OidcConfig {
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Option<ApiKey>,
    pub scopes: Vec<String>,
    /// E-mail domains whose users may log in (empty: all).
    pub allowed_domains: Vec<String>,
    pub admin_group: Option<String>,
    /// Verified e-mail addresses that are admins (lower case).
    pub admin_emails: Vec<String>,
    pub groups_claim: String,
    /// `PARLOR_PUBLIC_URL` + `/auth/callback`.
    pub redirect_url: String,
}

/// Accounts as the operator configured them.
#[derive(Clone, Debug)]
pub struct AuthConfig {
    pub mode: AuthMode,
    pub signup: bool,
    pub login_days: u64,
    /// `PARLOR_ADMINS`: accounts that are admins whatever their record says.
    pub admins: Vec<UserName>,
    /// `PARLOR_TOKENS_PER_DAY` (0: no quota).
    pub tokens_per_day: u64,
    /// The proxy's header naming the user (lower case).
    pub header: String,
    pub oidc: Option<OidcConfig>,
    /// `PARLOR_PASSWORD_CHECKS`: password checks run at once (none: twice the cores).
    pub password_checks: Option<usize>,
    /// The login cookie's name: [`LOGIN_COOKIE`], or [`HOST_LOGIN_COOKIE`] over https.
    pub login_cookie: &'static str,
}

/// The cookie of a login session.
pub const LOGIN_COOKIE: &str = "parlor_login";
/// The login cookie over https at the site's root: the `__Host-` prefix binds it to this
/// host, `Secure` and `/`.
pub const HOST_LOGIN_COOKIE: &str = "__Host-parlor_login";

impl AuthConfig {
    /// Whether every route but the open ones needs a login.
    pub fn required(&self) -> bool {
        self.mode != AuthMode::None
    }
}

/// How the accounts' variables are read.
pub(super) mod readers {
    use super::*;

    pub fn mode(value: &str) -> Result<AuthMode, String> {
        AuthMode::parse(value)
    }

    pub fn names(value: &str) -> Result<Vec<UserName>, String> {
        value
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|n| UserName::parse(n).map_err(|e| format!("{n:?}: {e}")))
            .collect()
    }

    pub fn words(value: &str) -> Result<Vec<String>, String> {
        let words: Vec<String> = value.split_whitespace().map(str::to_owned).collect();
        match words.iter().any(|w| w == "openid") {
            true => Ok(words),
            false => Err("must include openid, e.g. \"openid email profile\"".into()),
        }
    }

    pub fn domains(value: &str) -> Result<Vec<String>, String> {
        Ok(value
            .split(',')
            .map(|d| d.trim().trim_start_matches('@').to_lowercase())
            .filter(|d| !d.is_empty())
            .collect())
    }

    pub fn emails(value: &str) -> Result<Vec<String>, String> {
        value
            .split(',')
            .map(|e| e.trim().to_lowercase())
            .filter(|e| !e.is_empty())
            .map(|e| match e.split_once('@') {
                Some((local, domain)) if !local.is_empty() && !domain.is_empty() => Ok(e),
                _ => Err(format!("{e:?} is not an e-mail address")),
            })
            .collect()
    }

    pub fn header(value: &str) -> Result<String, String> {
        match axum::http::HeaderName::from_bytes(value.trim().as_bytes()) {
            Ok(name) => Ok(name.as_str().to_owned()),
            Err(_) => Err("must be an HTTP header name, e.g. X-Forwarded-User".into()),
        }
    }

    pub fn issuer(value: &str) -> Result<String, String> {
        match value.starts_with("https://") || value.starts_with("http://") {
            // As the provider writes it: its tokens' `iss` must match it exactly.
            true => Ok(value.to_owned()),
            false => Err("must be the provider's https:// address".into()),
        }
    }
}
