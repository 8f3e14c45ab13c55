//! Agents, read from AgentDock-format `template.json` files.
//!
//! Fields Parlor does not use are ignored, so real AgentDock templates load unmodified.
//! A template that is valid JSON but carries an unusable chat setting still loads: the
//! setting is ignored and reported as a [`TemplateWarning`].

use crate::history::{HistoryLength, HistoryPolicy};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// The raw template, as written on disk.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentTemplate {
    pub agent_id: String,
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub personality: Personality,
    /// The order nodes were declared in; used to pick the LLM node when there are several.
    #[serde(default)]
    pub nodes: Vec<String>,
    #[serde(default)]
    pub node_configurations: BTreeMap<String, Value>,
    #[serde(default)]
    pub chat_settings: RawChatSettings,
}

/// The system prompt: one string, or an array of strings joined by newlines.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(untagged)]
pub enum Personality {
    #[default]
    Empty,
    One(String),
    Lines(Vec<String>),
}

impl Personality {
    pub fn to_prompt(&self) -> String {
        match self {
            Personality::Empty => String::new(),
            Personality::One(text) => text.trim().to_owned(),
            Personality::Lines(lines) => lines
                .iter()
                .map(|l| l.trim())
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// Chat settings as written: history values stay raw so a bad one can be reported and
/// skipped instead of rejecting the whole template.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawChatSettings {
    #[serde(default)]
    pub history_policy: Option<Value>,
    #[serde(default)]
    pub history_length: Option<Value>,
    #[serde(default)]
    pub initial_messages: Vec<String>,
    #[serde(default)]
    pub chat_prompts: Vec<String>,
    /// Parlor extension: which configured history stores this agent's conversations.
    #[serde(default)]
    pub history_id: Option<String>,
    /// Keep system messages (the system prompt) under `lastN` and `none`; default true.
    #[serde(default)]
    pub preserve_system_messages: Option<Value>,
    /// Parlor extension: this agent's history processors (after the policy step), instead of
    /// the configured chain.
    #[serde(default)]
    pub history_processors: Option<Value>,
    /// Parlor extension: this agent's window ceiling (`agent_max_ctx`), in messages.
    #[serde(default)]
    pub max_context: Option<Value>,
    /// Parlor extension: the ids of the operator's context providers (`[[context]]` in
    /// `parlor.toml`) that run on this agent's turns.
    #[serde(default)]
    pub context: Vec<String>,
    /// Parlor extension: the tools this agent may call: a tool server's id (every tool it
    /// allows) or `<server>.<tool>` (one tool).
    #[serde(default)]
    pub tools: Vec<String>,
}

/// The LLM an agent's template asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct LlmNode {
    /// The part after `llm.` in the node name (`openai`, `anthropic`, …).
    pub provider: String,
    pub model: Option<String>,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
}

/// A chat setting in a template that was ignored, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateWarning {
    pub field: &'static str,
    pub reason: String,
}

impl std::fmt::Display for TemplateWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ignored: {}", self.field, self.reason)
    }
}

/// An agent ready to chat.
#[derive(Clone, Debug, PartialEq)]
pub struct Agent {
    pub id: String,
    pub name: String,
    pub description: String,
    pub system_prompt: String,
    pub llm: Option<LlmNode>,
    pub history_policy: Option<HistoryPolicy>,
    pub history_length: Option<HistoryLength>,
    pub initial_messages: Vec<String>,
    pub chat_prompts: Vec<String>,
    pub history_id: Option<String>,
    /// The context providers of this agent's turns, by id.
    pub context: Vec<String>,
    /// The tools this agent may call: server ids or `<server>.<tool>`.
    pub tools: Vec<String>,
    pub preserve_system_messages: bool,
    /// Validated processor names, when the template sets its own chain.
    pub history_processors: Option<Vec<String>>,
    /// The agent's own `agent_max_ctx`, when set.
    pub max_context: Option<usize>,
}

#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("not a valid agent template: {0}")]
    Json(#[from] serde_json::Error),
    #[error("agentId {0:?} must be 1-64 letters, digits, '-' or '_'")]
    BadId(String),
}

impl Agent {
    /// Parses a template file's contents.
    pub fn from_json(json: &str) -> Result<(Agent, Vec<TemplateWarning>), TemplateError> {
        let template: AgentTemplate = serde_json::from_str(json)?;
        Agent::from_template(template)
    }

    pub fn from_template(
        template: AgentTemplate,
    ) -> Result<(Agent, Vec<TemplateWarning>), TemplateError> {
        if !is_valid_agent_id(&template.agent_id) {
            return Err(TemplateError::BadId(template.agent_id));
        }
        let mut warnings = Vec::new();
        let settings = &template.chat_settings;
        let w = &mut warnings;
        let (history_policy, history_length) = (settings.policy(w), settings.length(w));
        let preserve_system_messages = settings.preserve_system_messages(w);
        let (history_processors, max_context) = (settings.processors(w), settings.max_context(w));
        let llm = pick_llm_node(&template.nodes, &template.node_configurations);
        Ok((
            Agent {
                system_prompt: template.personality.to_prompt(),
                id: template.agent_id,
                name: template.name,
                description: template.description,
                llm,
                history_policy,
                history_length,
                initial_messages: settings.initial_messages.clone(),
                chat_prompts: settings.chat_prompts.clone(),
                history_id: settings.history_id.clone(),
                context: settings.context.clone(),
                tools: settings.tools.clone(),
                preserve_system_messages,
                history_processors,
                max_context,
            },
            warnings,
        ))
    }
}

/// The history fields of `chatSettings`, each read with its own rule; a value a rule
/// refuses is a warning in `w` and the default applies.
impl RawChatSettings {
    fn policy(&self, w: &mut Vec<TemplateWarning>) -> Option<HistoryPolicy> {
        read_field(w, &self.history_policy, "chatSettings.historyPolicy", |v| {
            let text = v.as_str().ok_or_else(|| format!("{v} is not a string"))?;
            text.parse::<HistoryPolicy>().map_err(|e| e.to_string())
        })
    }

    fn length(&self, w: &mut Vec<TemplateWarning>) -> Option<HistoryLength> {
        read_field(w, &self.history_length, "chatSettings.historyLength", |v| {
            let n = v.as_i64().ok_or_else(|| format!("{v} is not an integer"))?;
            Ok(HistoryLength::new(n))
        })
    }

    fn preserve_system_messages(&self, w: &mut Vec<TemplateWarning>) -> bool {
        let field = "chatSettings.preserveSystemMessages";
        read_field(w, &self.preserve_system_messages, field, |v| {
            v.as_bool()
                .ok_or_else(|| format!("{v} is not true or false"))
        })
        .unwrap_or(true)
    }

    fn processors(&self, w: &mut Vec<TemplateWarning>) -> Option<Vec<String>> {
        read_field(
            w,
            &self.history_processors,
            "chatSettings.historyProcessors",
            |v| {
                let names = serde_json::from_value::<Vec<String>>(v.clone())
                    .map_err(|_| format!("{v} is not a list of processor names"))?;
                crate::chain::Chain::from_names(&names).map_err(|e| e.to_string())?;
                Ok(names)
            },
        )
    }

    fn max_context(&self, w: &mut Vec<TemplateWarning>) -> Option<usize> {
        read_field(
            w,
            &self.max_context,
            "chatSettings.maxContext",
            |v| match v.as_u64() {
                Some(n) if n >= 1 => Ok(n as usize),
                _ => Err(format!("{v} is not a whole number of at least 1")),
            },
        )
    }
}

/// A field of a template's `chatSettings`, read by `read` when present; a value it refuses
/// is a warning (the default applies), never an error.
fn read_field<T>(
    warnings: &mut Vec<TemplateWarning>,
    value: &Option<Value>,
    field: &'static str,
    read: impl FnOnce(&Value) -> Result<T, String>,
) -> Option<T> {
    read(value.as_ref()?)
        .map_err(|reason| warnings.push(TemplateWarning { field, reason }))
        .ok()
}

/// Agent ids appear in URLs and folder names.
pub fn is_valid_agent_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn pick_llm_node(order: &[String], configs: &BTreeMap<String, Value>) -> Option<LlmNode> {
    let declared = order.iter().filter(|n| configs.contains_key(*n));
    let name = declared
        .chain(configs.keys())
        .find(|name| name.starts_with("llm."))?;
    let config = &configs[name];
    Some(LlmNode {
        provider: name.trim_start_matches("llm.").to_owned(),
        model: config
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_owned),
        temperature: config.get("temperature").and_then(Value::as_f64),
        max_tokens: config
            .get("maxTokens")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGENTDOCK: &str = r#"{
        "version": "1.0",
        "agentId": "example-agent",
        "name": "Example Agent",
        "description": "Says hello",
        "tags": ["demo"],
        "personality": ["You are friendly.", "  ", "Answer briefly."],
        "nodes": ["search", "llm.anthropic"],
        "nodeConfigurations": {
            "llm.anthropic": {"model": "claude-3-7-sonnet", "temperature": 0.7, "maxTokens": 4096, "useCustomApiKey": false},
            "llm.openai": {"model": "gpt-4o"},
            "search": {"maxResults": 5}
        },
        "chatSettings": {
            "historyPolicy": "lastN",
            "historyLength": 10,
            "initialMessages": ["Hi!"],
            "chatPrompts": ["What can you do?"]
        },
        "options": {"maxSteps": 3}
    }"#;

    #[test]
    fn loads_an_agentdock_template_ignoring_unknown_fields() {
        let (agent, warnings) = Agent::from_json(AGENTDOCK).unwrap();
        assert!(warnings.is_empty());
        assert_eq!(agent.id, "example-agent");
        assert_eq!(agent.system_prompt, "You are friendly.\nAnswer briefly.");
        let llm = agent.llm.unwrap();
        assert_eq!(
            llm.provider, "anthropic",
            "the first LLM node in `nodes` order"
        );
        assert_eq!(llm.model.as_deref(), Some("claude-3-7-sonnet"));
        assert_eq!(llm.max_tokens, Some(4096));
        assert_eq!(agent.history_policy, Some(HistoryPolicy::LastN));
        assert_eq!(agent.history_length, Some(HistoryLength::new(10)));
        assert_eq!(agent.initial_messages, vec!["Hi!"]);
        assert_eq!(agent.chat_prompts, vec!["What can you do?"]);
        assert!(
            agent.preserve_system_messages,
            "kept unless a template says otherwise"
        );
    }

    #[test]
    fn templates_may_drop_system_messages() {
        let (agent, warnings) = Agent::from_json(
            r#"{"agentId":"a","name":"A","chatSettings":{"preserveSystemMessages":false}}"#,
        )
        .unwrap();
        assert!(warnings.is_empty());
        assert!(!agent.preserve_system_messages);
        let (agent, warnings) = Agent::from_json(
            r#"{"agentId":"a","name":"A","chatSettings":{"preserveSystemMessages":"no"}}"#,
        )
        .unwrap();
        assert!(agent.preserve_system_messages);
        assert_eq!(warnings[0].field, "chatSettings.preserveSystemMessages");
    }

    #[test]
    fn personality_may_be_a_single_string() {
        let (agent, _) =
            Agent::from_json(r#"{"agentId":"a","name":"A","personality":"Be kind."}"#).unwrap();
        assert_eq!(agent.system_prompt, "Be kind.");
        assert!(agent.llm.is_none());
    }

    #[test]
    fn bad_chat_settings_are_ignored_with_a_warning() {
        let (agent, warnings) = Agent::from_json(
            r#"{"agentId":"a","name":"A","chatSettings":{"historyPolicy":"LastN","historyLength":"5"}}"#,
        )
        .unwrap();
        assert_eq!(agent.history_policy, None);
        assert_eq!(agent.history_length, None);
        assert_eq!(warnings.len(), 2);
        assert_eq!(warnings[0].field, "chatSettings.historyPolicy");
        assert_eq!(warnings[1].field, "chatSettings.historyLength");
    }

    #[test]
    fn templates_may_set_their_own_chain_and_window() {
        let (agent, warnings) = Agent::from_json(
            r#"{"agentId":"a","name":"A","chatSettings":{"historyProcessors":["token_budget","role_alternation"],"maxContext":12}}"#,
        )
        .unwrap();
        assert!(warnings.is_empty());
        assert_eq!(
            agent.history_processors.as_deref(),
            Some(&["token_budget".to_owned(), "role_alternation".to_owned()][..])
        );
        assert_eq!(agent.max_context, Some(12));
        let (agent, warnings) = Agent::from_json(
            r#"{"agentId":"a","name":"A","chatSettings":{"historyProcessors":["policy"],"maxContext":0}}"#,
        )
        .unwrap();
        assert_eq!((agent.history_processors, agent.max_context), (None, None));
        let fields: Vec<&str> = warnings.iter().map(|w| w.field).collect();
        assert_eq!(
            fields,
            ["chatSettings.historyProcessors", "chatSettings.maxContext"]
        );
    }

    #[test]
    fn broken_templates_are_errors_with_a_reason() {
        assert!(Agent::from_json("{").is_err());
        assert!(Agent::from_json(r#"{"name":"no id"}"#).is_err());
        assert!(matches!(
            Agent::from_json(r#"{"agentId":"../x","name":"A"}"#),
            Err(TemplateError::BadId(_))
        ));
    }
}
