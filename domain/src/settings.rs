//! Resolving a conversation's history settings from the places that can set them.
//!
//! Each field (policy and length) is resolved on its own, highest source first:
//! the operator's environment, the page URL, the agent template, the built-in default.
//! A value that cannot be used is never applied silently: it is skipped and the reason is
//! recorded, so the debug panel can show why a setting did not take effect.

use crate::history::{HistoryLength, HistoryPolicy};
use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// Where a setting's value came from.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SettingSource {
    Environment,
    Url,
    Template,
    Default,
}

impl SettingSource {
    pub fn as_str(self) -> &'static str {
        match self {
            SettingSource::Environment => "environment",
            SettingSource::Url => "URL",
            SettingSource::Template => "template",
            SettingSource::Default => "default",
        }
    }
}

impl std::fmt::Display for SettingSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A resolved value, where it came from, and why higher sources did not decide it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolved<T> {
    pub value: T,
    pub source: SettingSource,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Everything that may set the history settings for one model call.
///
/// Environment and template values were validated when they were read (an invalid
/// environment value stops the server; an invalid template value is a startup warning), so
/// they arrive typed. URL values arrive raw: they are validated here, per request.
#[derive(Clone, Debug)]
pub struct SettingInputs<'a> {
    pub env_policy: Option<HistoryPolicy>,
    pub env_length: Option<HistoryLength>,
    pub url_policy: Option<&'a str>,
    pub url_length: Option<&'a str>,
    /// False when the operator turned URL overrides off.
    pub url_overrides_allowed: bool,
    pub template_policy: Option<HistoryPolicy>,
    pub template_length: Option<HistoryLength>,
    /// The template's `preserveSystemMessages` (true when it does not say).
    pub preserve_system: bool,
}

impl Default for SettingInputs<'_> {
    /// Nothing set anywhere: URL overrides allowed, system messages kept.
    fn default() -> Self {
        Self {
            env_policy: None,
            env_length: None,
            url_policy: None,
            url_length: None,
            url_overrides_allowed: true,
            template_policy: None,
            template_length: None,
            preserve_system: true,
        }
    }
}

/// The settings one model call uses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistorySettings {
    pub policy: Resolved<HistoryPolicy>,
    pub length: Resolved<HistoryLength>,
    pub preserve_system: bool,
}

impl HistorySettings {
    /// Settings given outright (e.g. on the command line), reported as the template's.
    pub fn fixed(policy: HistoryPolicy, length: HistoryLength, preserve_system: bool) -> Self {
        Self::resolve(&SettingInputs {
            template_policy: Some(policy),
            template_length: Some(length),
            preserve_system,
            ..SettingInputs::default()
        })
    }

    pub fn resolve(inputs: &SettingInputs<'_>) -> Self {
        Self {
            policy: resolve_field(
                "historyPolicy",
                inputs.env_policy,
                inputs.url_policy,
                inputs.url_overrides_allowed,
                inputs.template_policy,
                HistoryPolicy::LastN,
                |_| format!("not one of {}", HistoryPolicy::ALLOWED),
            ),
            length: resolve_field(
                "historyLength",
                inputs.env_length,
                inputs.url_length,
                inputs.url_overrides_allowed,
                inputs.template_length,
                HistoryLength::DEFAULT,
                |_| "not an integer".to_owned(),
            ),
            preserve_system: inputs.preserve_system,
        }
    }
}

fn resolve_field<T: FromStr + Copy>(
    url_key: &str,
    env: Option<T>,
    url: Option<&str>,
    url_allowed: bool,
    template: Option<T>,
    default: T,
    why_invalid: impl Fn(&str) -> String,
) -> Resolved<T> {
    let mut notes = Vec::new();
    if let Some(value) = env {
        if url.is_some() {
            notes.push("URL ignored: set by the environment".to_owned());
        }
        return Resolved {
            value,
            source: SettingSource::Environment,
            notes,
        };
    }
    if let Some(raw) = url {
        if !url_allowed {
            notes.push("URL ignored: URL overrides are turned off by the operator".to_owned());
        } else {
            match raw.parse::<T>() {
                Ok(value) => {
                    return Resolved {
                        value,
                        source: SettingSource::Url,
                        notes,
                    }
                }
                Err(_) => notes.push(format!(
                    "URL {url_key}={} ignored: {}",
                    printable(raw),
                    why_invalid(raw)
                )),
            }
        }
    }
    match template {
        Some(value) => Resolved {
            value,
            source: SettingSource::Template,
            notes,
        },
        None => Resolved {
            value: default,
            source: SettingSource::Default,
            notes,
        },
    }
}

/// A short, single-line rendering of an untrusted value for a note.
fn printable(raw: &str) -> String {
    const MAX: usize = 40;
    let mut out: String = raw
        .chars()
        .take(MAX)
        .flat_map(char::escape_default)
        .collect();
    if raw.chars().count() > MAX {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs<'a>() -> SettingInputs<'a> {
        SettingInputs::default()
    }

    #[test]
    fn built_in_default_is_last_20() {
        let s = HistorySettings::resolve(&inputs());
        assert_eq!(s.policy.value, HistoryPolicy::LastN);
        assert_eq!(s.policy.source, SettingSource::Default);
        assert_eq!(s.length.value, HistoryLength::new(20));
        assert_eq!(s.length.source, SettingSource::Default);
    }

    #[test]
    fn environment_beats_url_beats_template_per_field() {
        let s = HistorySettings::resolve(&SettingInputs {
            env_length: Some(HistoryLength::new(0)),
            url_policy: Some("all"),
            url_length: Some("7"),
            template_policy: Some(HistoryPolicy::None),
            template_length: Some(HistoryLength::new(3)),
            ..inputs()
        });
        assert_eq!(s.policy.value, HistoryPolicy::All);
        assert_eq!(s.policy.source, SettingSource::Url);
        assert_eq!(
            s.length.value,
            HistoryLength::new(0),
            "0 from the environment is a value"
        );
        assert_eq!(s.length.source, SettingSource::Environment);
        assert_eq!(s.length.notes, vec!["URL ignored: set by the environment"]);
    }

    #[test]
    fn invalid_url_values_fall_through_and_are_reported() {
        let s = HistorySettings::resolve(&SettingInputs {
            url_policy: Some("LASTN"),
            url_length: Some("abc"),
            template_length: Some(HistoryLength::new(4)),
            ..inputs()
        });
        assert_eq!(s.policy.source, SettingSource::Default);
        assert!(s.policy.notes[0].starts_with("URL historyPolicy=LASTN ignored"));
        assert_eq!(s.length.value, HistoryLength::new(4));
        assert_eq!(s.length.source, SettingSource::Template);
        assert_eq!(
            s.length.notes,
            vec!["URL historyLength=abc ignored: not an integer"]
        );
    }

    #[test]
    fn operators_can_turn_url_overrides_off() {
        let s = HistorySettings::resolve(&SettingInputs {
            url_policy: Some("all"),
            url_overrides_allowed: false,
            ..SettingInputs::default()
        });
        assert_eq!(s.policy.source, SettingSource::Default);
        assert!(s.policy.notes[0].contains("turned off"));
    }

    #[test]
    fn notes_never_echo_control_characters() {
        let s = HistorySettings::resolve(&SettingInputs {
            url_length: Some("1\n<script>"),
            ..inputs()
        });
        assert!(!s.length.notes[0].contains('\n'));
    }
}
