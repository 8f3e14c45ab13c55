//! Logging in with one OpenID Connect provider (`PARLOR_AUTH=oidc`): the authorization code
//! flow with PKCE, `state` and `nonce`, through the `openidconnect` crate on Parlor's own
//! reqwest client. The provider's discovery document (and keys) is read when first needed
//! and kept an hour; a provider that is down does not stop Parlor: logging in says so, and
//! `/readyz` reports it.

use super::store::{hash_secret, Flow, Subject};
use super::{password, Account, Accounts};
use crate::config::auth::OidcConfig;
use crate::store::StoreError;
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreProviderMetadata};
use openidconnect::{
    AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointMaybeSet, EndpointNotSet,
    EndpointSet, IssuerUrl, Nonce, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope,
    TokenResponse,
};
use parlor_domain::account::UserName;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// How long a login at the provider may take.
pub const FLOW_MS: i64 = 10 * 60 * 1000;
/// How long the discovery document is kept.
const KEEP_DISCOVERY: Duration = Duration::from_secs(3600);
/// How soon a provider that could not be reached is asked again.
const RETRY_DISCOVERY: Duration = Duration::from_secs(5);

/// A client made from discovery: an authorization endpoint, and maybe a token and userinfo
/// endpoint (the exchange checks the token endpoint is there).
type Client = CoreClient<
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

enum Discovery {
    NotYet,
    Ready(Box<CoreProviderMetadata>, Instant),
    Failed(String, Instant),
}

/// The provider, as far as Parlor knows it.
pub struct Provider {
    pub config: OidcConfig,
    http: reqwest::Client,
    discovery: Mutex<Discovery>,
}

/// Why a login through the provider failed: said on the login page.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    #[error("the login provider cannot be reached: {0}")]
    Unreachable(String),
    #[error("this login does not match the one this browser started (state); start again")]
    State,
    #[error("this login was already used or took too long; start again")]
    Gone,
    #[error("the provider refused the login: {0}")]
    Refused(String),
    #[error("the provider's answer could not be verified: {0}")]
    Invalid(String),
    #[error("accounts from {0} may not log in here")]
    Domain(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What the provider said about who logged in.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    pub subject: Subject,
    pub name: String,
    pub email: Option<String>,
    /// Whether the provider says it verified the e-mail address (`email_verified`).
    pub email_verified: bool,
    pub groups: Vec<String>,
}

impl Provider {
    pub fn new(config: OidcConfig) -> Provider {
        let http = reqwest::Client::builder()
            // Never follow a redirect from the provider's endpoints (no request forgery).
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .build()
            .expect("an HTTP client with rustls");
        Provider {
            config,
            http,
            discovery: Mutex::new(Discovery::NotYet),
        }
    }

    /// The provider's metadata: kept, or read again (a failure is not retried for a few
    /// seconds, so a down provider is not hammered).
    async fn metadata(&self) -> Result<CoreProviderMetadata, OidcError> {
        let mut discovery = self.discovery.lock().await;
        match &*discovery {
            Discovery::Ready(metadata, at) if at.elapsed() < KEEP_DISCOVERY => {
                return Ok((**metadata).clone())
            }
            Discovery::Failed(why, at) if at.elapsed() < RETRY_DISCOVERY => {
                return Err(OidcError::Unreachable(why.clone()))
            }
            _ => {}
        }
        let issuer = IssuerUrl::new(self.config.issuer.clone())
            .map_err(|e| OidcError::Unreachable(format!("the issuer is not a URL: {e}")))?;
        match CoreProviderMetadata::discover_async(issuer, &self.http).await {
            Ok(metadata) => {
                *discovery = Discovery::Ready(Box::new(metadata.clone()), Instant::now());
                Ok(metadata)
            }
            Err(e) => {
                let why = error_chain(&e);
                tracing::warn!("OpenID provider {}: {why}", self.config.issuer);
                *discovery = Discovery::Failed(why.clone(), Instant::now());
                Err(OidcError::Unreachable(why))
            }
        }
    }

    /// The provider as the login page names it: its issuer's host.
    pub fn display_name(&self) -> String {
        let issuer = &self.config.issuer;
        let host = issuer.split("://").nth(1).unwrap_or(issuer);
        host.split('/').next().unwrap_or(host).to_owned()
    }

    /// `ok`, or why the provider could not be reached (for `/readyz`); it is asked now.
    pub async fn status(&self) -> String {
        match self.metadata().await {
            Ok(_) => "ok".into(),
            Err(e) => e.to_string(),
        }
    }

    fn client(&self, metadata: CoreProviderMetadata) -> Result<Client, OidcError> {
        let redirect = RedirectUrl::new(self.config.redirect_url.clone())
            .map_err(|e| OidcError::Invalid(format!("PARLOR_PUBLIC_URL: {e}")))?;
        let secret = self
            .config
            .client_secret
            .as_ref()
            .map(|s| ClientSecret::new(s.expose().to_owned()));
        Ok(CoreClient::from_provider_metadata(
            metadata,
            ClientId::new(self.config.client_id.clone()),
            secret,
        )
        .set_redirect_uri(redirect))
    }

    /// Starts a login: the provider's address to send the browser to, and the `state` the
    /// browser keeps in its cookie (the flow is stored under its hash).
    pub async fn start(
        &self,
        accounts: &Accounts,
        next: &str,
        now_ms: i64,
    ) -> Result<(String, String), OidcError> {
        let client = self.client(self.metadata().await?)?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client.authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        );
        for scope in self.config.scopes.iter().filter(|s| *s != "openid") {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        let (url, state, nonce) = request.set_pkce_challenge(challenge).url();
        let flow = Flow {
            nonce: nonce.secret().clone(),
            pkce_verifier: verifier.secret().clone(),
            next: next.to_owned(),
            expires_ms: now_ms + FLOW_MS,
        };
        accounts
            .store()
            .put_flow(&hash_secret(state.secret()), &flow)
            .await?;
        Ok((url.to_string(), state.secret().clone()))
    }

    /// Finishes a login: the callback's `state` must be the browser's (its cookie) and a
    /// flow not yet used; the code is exchanged (with the PKCE verifier) and the ID token
    /// verified (signature, issuer, audience, expiry, nonce).
    pub async fn finish(
        &self,
        accounts: &Accounts,
        code: &str,
        state: &str,
        browser_state: Option<&str>,
        now_ms: i64,
    ) -> Result<(Identity, String), OidcError> {
        if browser_state != Some(state) || state.is_empty() {
            return Err(OidcError::State);
        }
        let flow = accounts
            .store()
            .take_flow(&hash_secret(state), now_ms)
            .await?
            .ok_or(OidcError::Gone)?;
        let client = self.client(self.metadata().await?)?;
        let token = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(|e| OidcError::Invalid(e.to_string()))?
            .set_pkce_verifier(PkceCodeVerifier::new(flow.pkce_verifier))
            .request_async(&self.http)
            .await
            .map_err(|e| OidcError::Refused(error_chain(&e)))?;
        let id_token = token
            .id_token()
            .ok_or_else(|| OidcError::Invalid("no ID token in the answer".into()))?;
        let claims = id_token
            .claims(&client.id_token_verifier(), &Nonce::new(flow.nonce))
            .map_err(|e| OidcError::Invalid(e.to_string()))?;
        let email = claims.email().map(|e| e.as_str().to_owned());
        let name = claims
            .preferred_username()
            .map(|u| u.as_str().to_owned())
            .or_else(|| email.clone())
            .unwrap_or_else(|| claims.subject().as_str().to_owned());
        let identity = Identity {
            subject: Subject {
                issuer: claims.issuer().as_str().to_owned(),
                sub: claims.subject().as_str().to_owned(),
            },
            name,
            groups: groups(&id_token.to_string(), &self.config.groups_claim),
            email_verified: claims.email_verified() == Some(true),
            email,
        };
        self.check_domain(&identity)?;
        Ok((identity, flow.next))
    }

    /// `PARLOR_OIDC_ALLOWED_DOMAINS`: the e-mail's domain must be one of them (when set), and
    /// the provider must say it verified the address (anyone can type any address into an
    /// account at many providers).
    fn check_domain(&self, identity: &Identity) -> Result<(), OidcError> {
        let allowed = &self.config.allowed_domains;
        if allowed.is_empty() {
            return Ok(());
        }
        if !identity.email_verified {
            return Err(OidcError::Domain(
                "an account whose e-mail address the provider has not verified".into(),
            ));
        }
        let domain = identity
            .email
            .as_deref()
            .and_then(|e| e.rsplit_once('@'))
            .map(|(_, d)| d.to_lowercase());
        match domain {
            Some(d) if allowed.contains(&d) => Ok(()),
            Some(d) => Err(OidcError::Domain(d)),
            None => Err(OidcError::Domain(
                "an account without an e-mail address".into(),
            )),
        }
    }

    /// Whether the identity is an admin: in the admin group, or with a verified e-mail
    /// address listed in `PARLOR_OIDC_ADMIN_EMAILS` (neither configured: not decided here,
    /// the account's record says). A name never makes an admin here: anyone may choose
    /// their `preferred_username` at many providers.
    pub fn is_admin(&self, identity: &Identity) -> Option<bool> {
        let by_group = self
            .config
            .admin_group
            .as_ref()
            .map(|group| identity.groups.iter().any(|g| g == group));
        let emails = &self.config.admin_emails;
        let by_email = (!emails.is_empty()).then(|| {
            identity.email_verified
                && identity
                    .email
                    .as_deref()
                    .is_some_and(|e| emails.contains(&e.to_lowercase()))
        });
        match (by_group, by_email) {
            (None, None) => None,
            (group, email) => Some(group.unwrap_or(false) || email.unwrap_or(false)),
        }
    }
}

/// An error with its causes (the crate's errors say little at the top).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The groups an ID token (already verified) lists under `claim`: an array of strings, or
/// one string.
fn groups(jwt: &str, claim: &str) -> Vec<String> {
    use base64::Engine;
    let Some(payload) = jwt.split('.').nth(1) else {
        return Vec::new();
    };
    let Ok(bytes) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload) else {
        return Vec::new();
    };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return Vec::new();
    };
    match &value[claim] {
        serde_json::Value::Array(items) => items
            .iter()
            .filter_map(|g| g.as_str().map(str::to_owned))
            .collect(),
        serde_json::Value::String(one) => vec![one.clone()],
        _ => Vec::new(),
    }
}

impl Accounts {
    /// The account of an identity from the provider: found by (issuer, subject), else made
    /// under the name it gives (made unique with `-2`, `-3`…). Its admin flag follows the
    /// admin group at every login, when one is configured.
    pub async fn of_identity(
        &self,
        identity: &Identity,
        admin: Option<bool>,
    ) -> Result<Account, StoreError> {
        let store = self.store();
        let known = store
            .users()
            .await?
            .into_iter()
            .find(|a| a.subject.as_ref() == Some(&identity.subject));
        let display = Some(parlor_domain::account::display_name(&identity.name));
        if let Some(mut account) = known {
            let admin = admin.unwrap_or(account.admin);
            if admin != account.admin || display != account.display {
                account.admin = admin;
                account.display = display;
                store.put_user(&account).await?;
            }
            return Ok(account);
        }
        let base = UserName::from_claim(&identity.name)
            .or_else(|| UserName::from_claim("user"))
            .expect("`user` is a name");
        for n in 1..1000 {
            let name = match n {
                1 => base.clone(),
                n => {
                    let suffix = format!("-{n}");
                    let cut: String = base.as_str().chars().take(64 - suffix.len()).collect();
                    UserName::parse(&format!("{cut}{suffix}")).unwrap_or_else(|_| base.clone())
                }
            };
            let account = Account {
                name,
                id: password::random_hex(),
                admin: admin.unwrap_or(false),
                created_ms: crate::store::now_ms(),
                password: None,
                subject: Some(identity.subject.clone()),
                logins_after_ms: None,
                display: display.clone(),
            };
            if store.add_user(&account).await? {
                return Ok(account);
            }
        }
        Err(StoreError::Corrupt(format!(
            "no free account name for {}",
            identity.name
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_read_from_the_tokens_payload() {
        use base64::Engine;
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(br#"{"groups":["staff","parlor-admins"],"role":"x"}"#);
        let jwt = format!("h.{payload}.s");
        assert_eq!(groups(&jwt, "groups"), vec!["staff", "parlor-admins"]);
        assert_eq!(groups(&jwt, "role"), vec!["x"]);
        assert!(groups(&jwt, "missing").is_empty());
        assert!(groups("not a jwt", "groups").is_empty());
    }
}
