//! What a turn's model call is planned with, gathered from the server's services (the
//! conversation's model, its token counter, the system messages, the chain), and the
//! request made of the plan.

use super::reply::ReplyError;
use super::TurnContext;
use crate::llm::models::{token_counter, ModelSpec};
use crate::llm::{LlmClient, LlmError, ModelRequest};
use crate::store::ConversationInfo;
use parlor_domain::chain::{Chain, TokenCounter};
use parlor_domain::plan::Plan;
use parlor_domain::tool::rounds::definition_tokens;
use parlor_domain::turn::call::{CallInput, Model, StoredSummary};
use std::sync::Arc;

/// The owned values [`CallInput`] borrows.
pub(crate) struct CallFacts {
    pub model: Option<ModelSpec>,
    pub tokens: Arc<dyn TokenCounter>,
    system: Vec<String>,
    chain: Chain,
    max_ctx: usize,
    max_turns: Option<usize>,
    provider: String,
    /// The tokens of the definitions of the tools the agent is offered.
    pub tool_tokens: u64,
}

impl TurnContext<'_> {
    /// The facts of a call in the conversation `info`, with its current model.
    pub(crate) fn call_facts(&self, info: &ConversationInfo) -> CallFacts {
        let models = &self.services.models;
        let model = models.for_conversation(self.agent, info.model.as_deref());
        let upstream = model.as_ref().map(|m| m.upstream.as_str());
        let tokens = token_counter(upstream.unwrap_or_default());
        let tools = &self.services.tools;
        let tool_tokens = match self.agent.tools.is_empty() {
            true => 0,
            false => {
                let offered = tools.offered(self.agent, info.owner.as_deref());
                definition_tokens(&offered, tokens.as_ref())
            }
        };
        CallFacts {
            tokens,
            tool_tokens,
            provider: models.provider_label(model.as_ref()),
            model,
            system: self
                .history
                .system_message
                .iter()
                .chain(Some(&self.agent.system_prompt).filter(|p| !p.is_empty()))
                .cloned()
                .collect(),
            chain: self.services.chain_for(self.agent),
            max_ctx: self.services.max_ctx_for(self.agent),
            max_turns: self.history.store.max_turns().map(|max| max.get()),
        }
    }
}

impl CallFacts {
    /// What fitting each model call of the turn needs (`planned_tokens`: the tokens of the
    /// planned messages).
    pub(crate) fn budget(&self, planned_tokens: u64) -> super::tools::Budget {
        super::tools::Budget {
            limit: self.model.as_ref().and_then(|m| m.limits.token_budget),
            tool_tokens: self.tool_tokens,
            planned_tokens,
            tokens: self.tokens.clone(),
            last_without_tools: self
                .model
                .as_ref()
                .is_some_and(|m| m.last_call_without_tools),
        }
    }

    pub(crate) fn input<'a>(
        &'a self,
        turn: &'a TurnContext<'_>,
        summary: Option<&'a StoredSummary>,
    ) -> CallInput<'a> {
        CallInput {
            agent_id: &turn.agent.id,
            provider: &self.provider,
            system: &self.system,
            settings: &turn.settings,
            chain: &self.chain,
            model: self.model.as_ref().map(|m| Model {
                name: m.name(),
                limits: &m.limits,
                window: m.window,
                priced: m.prices.is_some(),
            }),
            tokens: self.tokens.as_ref(),
            max_ctx: self.max_ctx,
            summary,
            max_turns: self.max_turns,
            tool_tokens: self.tool_tokens,
        }
    }

    /// The upstream request of a plan, or why there is none.
    pub(crate) fn request(
        &self,
        turn: &TurnContext<'_>,
        plan: Plan,
    ) -> Result<(LlmClient, ModelRequest), ReplyError> {
        if let Some(refused) = plan.error {
            return Err(refused.into());
        }
        let Some(model) = &self.model else {
            return Err(LlmError::NoModel {
                agent: turn.agent.id.clone(),
            }
            .into());
        };
        let llm = turn.agent.llm.as_ref();
        Ok((
            turn.services.models.client_for(model),
            ModelRequest {
                model: model.upstream.clone(),
                messages: plan.messages,
                temperature: llm.and_then(|l| l.temperature),
                max_tokens: llm.and_then(|l| l.max_tokens),
                tools: Vec::new(),
                // The first call of a turn; later ones are left to the model.
                tool_choice: Some(model.tool_choice.clone()),
            },
        ))
    }
}
