//! Parlor's answers to `!` commands: a `meta` event (the window that applies from now on), a
//! `notice`, and `done`. Commands and notices are not stored in the conversation.

use super::{Turn, TurnContext, TurnError};
use crate::llm::models::token_counter;
use crate::settings::{apply_edit, Edit};
use crate::state::BusyGuard;
use crate::store::ConversationInfo;
use parlor_domain::chain::{ModelLimits, ModelSwitch};
use parlor_domain::command::{Command, Usage, HELP};
use parlor_domain::plan::model_switch;
use parlor_domain::turn::call::call;
use parlor_domain::turn::Sent;
use parlor_domain::{ChatEvent, DoneEvent};
use tokio::sync::mpsc;

/// Answers `command` (or its usage, when it was malformed) in the conversation `info`.
pub(crate) async fn answer(
    turn: &TurnContext<'_>,
    command: Result<Command, Usage>,
    mut info: ConversationInfo,
    busy: BusyGuard,
) -> Result<Turn, TurnError> {
    let notice = match command {
        Err(usage) => usage.0,
        Ok(Command::Help) => HELP.to_owned(),
        Ok(Command::Model(None)) => current_model(turn, &info),
        Ok(Command::Model(Some(name))) => switch_model(turn, &mut info, name).await?,
        Ok(Command::Reset) => reset(turn, &mut info).await?,
        Ok(Command::Summary) => show_summary(turn, &info).await?,
        Ok(Command::Compact) => compact(turn, &info).await?,
        Ok(admin) => self::admin(turn, admin).await,
    };

    let store = &turn.history.store;
    let stored = store.load(&info.session_id).await?;
    let sent = Sent {
        total: stored.len(),
        tail: stored,
        context: None,
        older_pins: Vec::new(),
    };
    let facts = turn.call_facts(&info);
    let meta = call(&mut info, sent, false, &facts.input(turn, None)).meta;
    store.put_info(&info).await?;
    busy.release().await;
    crate::ops::metrics::turn("command");
    let (tx, rx) = mpsc::channel(2);
    let _ = tx.try_send(ChatEvent::Notice { text: notice });
    let _ = tx.try_send(ChatEvent::Done(Box::new(DoneEvent {
        finish_reason: "command".into(),
        usage: None,
        html: None,
        message_id: None,
        meter: None,
        message_tokens: None,
    })));
    Ok(Turn {
        meta: Box::new(meta),
        events: rx,
    })
}

/// `!model`: the current model and the ones to switch to.
fn current_model(turn: &TurnContext<'_>, info: &ConversationInfo) -> String {
    let models = &turn.services.models;
    let current = models.for_conversation(turn.agent, info.model.as_deref());
    format!(
        "Current model: '{}'. Available: {}.",
        current.as_ref().map(|m| m.name()).unwrap_or("none"),
        models.available(turn.agent).join(", ")
    )
}

/// `!model <name>`: switches the conversation's model and applies the new window at once
/// (each processor's model-switch step, in chain order).
async fn switch_model(
    turn: &TurnContext<'_>,
    info: &mut ConversationInfo,
    name: String,
) -> Result<String, TurnError> {
    let models = &turn.services.models;
    let available = models.available(turn.agent);
    if !available.contains(&name) {
        return Ok(format!(
            "Unknown model '{name}'; nothing changed. Available: {}.",
            available.join(", ")
        ));
    }
    let from = models.for_conversation(turn.agent, info.model.as_deref());
    let to = models.named(&name);
    let stored = turn.history.store.load(&info.session_id).await?;
    let fallback = ModelLimits::default();
    let switch = ModelSwitch {
        from: from.as_ref().map(|m| &m.limits).unwrap_or(&fallback),
        to: &to.limits,
    };
    let tokens = token_counter(&to.upstream);
    let (removed, kept) = model_switch(
        stored,
        &turn.settings,
        &turn.services.chain_for(turn.agent),
        &switch,
        turn.services.max_ctx_for(turn.agent),
        tokens.as_ref(),
    );
    info.model = Some(name.clone());
    let mut notice = format!("Model set to '{name}'.");
    if removed > 0 {
        notice.push_str(&format!(
            "\nHistory trimmed: {removed} message(s) removed ({kept} kept)."
        ));
    }
    Ok(notice)
}

/// `!reset`: clears the conversation (file histories keep a backup first).
async fn reset(turn: &TurnContext<'_>, info: &mut ConversationInfo) -> Result<String, TurnError> {
    let backup = turn.history.store.clear(&info.session_id).await?;
    info.last_turn = None;
    Ok(match backup {
        Some(backup) => format!("Conversation cleared. A backup was kept ({}).", backup.id),
        None => "Conversation cleared.".to_owned(),
    })
}

/// `!summary`: the rolling summary and what it covers.
async fn show_summary(
    turn: &TurnContext<'_>,
    info: &ConversationInfo,
) -> Result<String, TurnError> {
    use parlor_domain::summary::{for_model, Covers};
    let id = &info.session_id;
    let failure = turn.services.summarizers.failure(&turn.history.id, id);
    let mut notice = match turn.history.store.summary(id).await? {
        None => "No summary yet: it starts when messages are no longer sent to the model \
                 (with the summary processor in the chain)."
            .to_owned(),
        Some(summary) => {
            let covers = Covers::of(&summary);
            let text: serde_json::Value =
                serde_json::from_str(&for_model(&summary)).unwrap_or_default();
            format!(
                "Summary of {} earlier message(s):\n{}",
                covers.messages,
                serde_json::to_string_pretty(&text).unwrap_or_default()
            )
        }
    };
    if let Some(failure) = failure {
        notice.push_str(&format!("\nThe last update failed: {failure}"));
    }
    Ok(notice)
}

/// `!compact`: brings the summary up to date with what the last model call left out.
async fn compact(turn: &TurnContext<'_>, info: &ConversationInfo) -> Result<String, TurnError> {
    use crate::conversation::summarizer::{bring_up_to_date, Outcome, SummarizeError};
    let first_sent = info
        .last_turn
        .as_ref()
        .map_or(0, |t| t.history.first_sent_index);
    if let Some(refused) = quota_used_up(turn).await {
        return Ok(refused);
    }
    let payer = turn.payer();
    let outcome = bring_up_to_date(
        turn.services,
        turn.history,
        turn.agent,
        (&info.session_id, info.model.as_deref()),
        first_sent,
        payer.as_deref(),
    )
    .await;
    Ok(match outcome {
        Ok(Outcome::Updated(n)) => format!("Summary updated: {n} more message(s) covered."),
        Ok(Outcome::UpToDate) => "The summary is up to date.".to_owned(),
        Ok(Outcome::Superseded) => "The conversation changed while the summary was being \
                                    written (a reset, or a summary from another tool); nothing \
                                    was written. Try again."
            .to_owned(),
        Err(SummarizeError::Store(e)) => return Err(e.into()),
        Err(e) => format!("The summary was not updated: {e}. The old one is kept."),
    })
}

/// Why `!compact` may not call the model for the account chatting (its daily quota is used
/// up), if it may not.
async fn quota_used_up(turn: &TurnContext<'_>) -> Option<String> {
    let (accounts, user) = (turn.services.accounts.as_ref()?, turn.user.as_ref()?);
    let quota = accounts.quota(user, crate::store::now_ms()).await.ok()?;
    (!quota.allows_a_turn()).then(|| {
        format!(
            "The summary was not updated: today's quota of {} tokens is used up.",
            quota.per_day
        )
    })
}

/// Applies an admin command (the token was checked) and saves it unless temporary.
async fn admin(turn: &TurnContext<'_>, command: Command) -> String {
    let services = turn.services;
    let limits = &services.limits;
    let (edit, what, temporary) = match command {
        Command::MaxCtx { value, temporary } => {
            limits.set_agent_max_ctx(value);
            let what = format!("agent_max_ctx set to {value}");
            (Edit::AgentMaxCtx(value), what, temporary)
        }
        Command::MaxUsers(n) => {
            limits.set_max_users(n);
            let label = if n == 0 {
                "no limit".to_owned()
            } else {
                n.to_string()
            };
            let what = format!("max_users set to {label}");
            (Edit::MaxUsers(n), what, false)
        }
        Command::SessionTimeout(minutes) => {
            limits.set_idle_timeout_minutes(minutes);
            let label = if minutes == 0 {
                "never (reaper off)".to_owned()
            } else {
                format!("{minutes} minute(s)")
            };
            let what = format!("session_idle_timeout_minutes set to {label}");
            (Edit::IdleTimeoutMinutes(minutes), what, false)
        }
        Command::Model(_)
        | Command::Reset
        | Command::Help
        | Command::Summary
        | Command::Compact => return "not an admin command".to_owned(),
    };
    tracing::info!("admin: {what}");
    if temporary {
        return format!("{what} (until Parlor restarts).");
    }
    let path = services.config_path.clone();
    let data_dir = services.config.data_dir.clone();
    let saved = tokio::task::spawn_blocking(move || apply_edit(&path, &edit, &data_dir)).await;
    match saved {
        Ok(Ok(())) => format!("{what} (saved to {}).", services.config_path.display()),
        Ok(Err(e)) => format!("{what} for now, but it could not be saved: {e}"),
        Err(e) => format!("{what} for now, but it could not be saved: {e}"),
    }
}
