//! The `?debug=true` panel: which history settings apply and where they came from, and what
//! the last model call was sent.
//!
//! Rendered on the server only, like Markdown: the chat island shows the HTML it is given
//! (in the page, then fetched again after every turn), so none of this is in the browser's
//! WASM.

use super::debug_tools::{ExchangeFacts, ToolFacts, ToolServers};
use leptos::prelude::*;
use leptos::tachys::view::RenderHtml;
use parlor_domain::context::{BlockReport, ContextReport};
use parlor_domain::summary::SummaryReport;
use parlor_domain::{DebugInfo, SettingsReport};

/// The panel's inner HTML for `info`, where the conversation now holds `messages` messages.
pub fn render(info: DebugInfo, messages: usize) -> String {
    let owner = Owner::new();
    owner.with(|| {
        view! {
            <h2>"History debug"</h2>
            <DebugFacts info messages/>
        }
        .to_html()
    })
}

/// The conversation's versions: the path the model receives, the others, and where they
/// branch off.
fn versions_line(v: &parlor_domain::branch::VersionFacts) -> String {
    let at: Vec<String> =
        v.at.iter()
            .map(|p| format!("#{} ({}/{})", p.index + 1, p.n, p.of))
            .collect();
    format!(
        "the model receives the chosen path ({}); {} other version(s) ({}) branch off at {}",
        count_of(v.path, "message"),
        v.branches,
        count_of(v.off_path, "message"),
        at.join(", ")
    )
}

/// How the provider's prompt cache served the last call, and why its prefix changed.
#[component]
fn CacheFacts(
    cache: Option<parlor_domain::cache::CacheUse>,
    change: Option<parlor_domain::cache::PrefixChange>,
) -> impl IntoView {
    view! {
        {cache.map(|c| view! {
            <dt>"Prompt cache"</dt>
            <dd data-fact="cache">{format!(
                "{} read, {} written, {} fresh ({}% read from the cache)",
                c.read, c.written, c.fresh, c.read_percent()
            )}</dd>
        })}
        {change.map(|change| view! {
            <dt>"Prefix changed"</dt>
            <dd data-fact="prefix-change">{change.describe()}</dd>
        })}
    }
}

#[component]
fn DebugFacts(
    info: DebugInfo,
    /// The conversation as the user sees it now (replies included), not as it was when the
    /// last turn was planned.
    messages: usize,
) -> impl IntoView {
    let settings = info.settings.clone();
    let turn = info.last_turn.clone();
    let session = info
        .session_id
        .as_deref()
        .map(|s| format!("{}…", &s[..s.len().min(8)]))
        .unwrap_or_else(|| "new conversation".into());
    view! {
        <dl class="facts">
            <dt>"Policy"</dt>
            <dd data-fact="policy">
                {settings.policy.clone()}
                " "
                <span class="source" data-fact="policy-source">{settings.policy_source.as_str()}</span>
            </dd>
            <Notes notes=settings.policy_notes.clone()/>
            <dt>"Length"</dt>
            <dd data-fact="length">
                {length_label(&settings)}
                " "
                <span class="source" data-fact="length-source">{settings.length_source.as_str()}</span>
            </dd>
            <Notes notes=settings.length_notes.clone()/>
            <dt>"Messages"</dt>
            <dd data-fact="messages">{count_of(messages, "message")}</dd>
            {info.versions.clone().map(|v| view! {
                <dt>"Versions"</dt>
                <dd data-fact="versions">{versions_line(&v)}</dd>
            })}
            {match turn {
                Some(turn) => {
                    let h = turn.history.clone();
                    let tokens = if turn.tokens_exact {
                        format!("{} (reported by the model)", turn.tokens_sent)
                    } else {
                        format!("~{} (estimate)", turn.tokens_sent)
                    };
                    view! {
                        <dt>"Sent last turn"</dt>
                        <dd data-fact="sent">
                            {count_of(h.messages_sent, "message")}" (with the system prompt)"
                        </dd>
                        <dt>"Stored then"</dt>
                        <dd data-fact="stored">{count_of(h.messages_stored, "message")}</dd>
                        <dt>"Trimmed"</dt>
                        <dd data-fact="trimmed">{count_of(h.messages_trimmed, "message")}</dd>
                        <dt>"Window"</dt>
                        <dd data-fact="window">
                            {count_of(h.effective_ctx, "message")}
                            {h.token_budget.map(|b| format!(", budget {b} tokens"))}
                        </dd>
                        <dt>"Chain"</dt>
                        <dd data-fact="chain">
                            <ol class="chain">
                                {h.chain.iter().map(|step| {
                                    let removed = step.removed;
                                    let added = step.added;
                                    view! {
                                        <li data-step=step.name.clone()>
                                            {step.name.clone()}
                                            {(added > 0).then(|| view! {
                                                <span class="added">{format!(" +{added}")}</span>
                                            })}
                                            {(removed > 0).then(|| view! {
                                                <span class="removed">{format!(" −{removed}")}</span>
                                            })}
                                            {format!(" → {}", step.kept)}
                                        </li>
                                    }
                                }).collect_view()}
                            </ol>
                        </dd>
                        <dt>"Tokens sent"</dt>
                        <dd data-fact="tokens">{tokens}</dd>
                        <CacheFacts cache=turn.cache change=turn.prefix_change.clone()/>
                        {h.marks.map(|m| view! {
                            <dt>"Marks"</dt>
                            <dd data-fact="marks">
                                {count_of(m.pinned_sent, "pinned message")}" sent"
                                {(m.pinned_dropped > 0).then(|| format!(
                                    ", {} dropped by the token budget",
                                    m.pinned_dropped
                                ))}
                                ", "{count_of(m.excluded, "excluded message")}" left out"
                            </dd>
                        })}
                        {h.context.map(|c| view! { <ContextFacts report=*c/> })}
                        {h.summary.map(|s| view! { <SummaryFacts report=*s/> })}
                        {turn.tools.map(|report| view! { <ToolFacts report/> })}
                        <ExchangeFacts exchanges=h.exchanges/>
                    }
                        .into_any()
                }
                None => view! {
                    <dt>"Last turn"</dt>
                    <dd data-fact="sent">"nothing sent yet"</dd>
                }
                    .into_any(),
            }}
            <ToolServers servers=info.tool_servers.clone()/>
            <dt>"Model"</dt>
            <dd data-fact="model">{info.model.clone()}" · "{info.provider.clone()}</dd>
            <dt>"Agent"</dt>
            <dd data-fact="agent">{info.agent_id.clone()}</dd>
            <dt>"Session"</dt>
            <dd data-fact="session" title=info.session_id.clone().unwrap_or_default()>{session}</dd>
        </dl>
    }
}

/// "1 message", "3 messages".
fn count_of(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn length_label(settings: &SettingsReport) -> String {
    if settings.policy == "lastN" {
        settings.length_label()
    } else {
        format!(
            "{} (not used by {})",
            settings.length_label(),
            settings.policy
        )
    }
}

#[component]
fn Notes(notes: Vec<String>) -> impl IntoView {
    (!notes.is_empty()).then(|| {
        view! {
            <dd class="notes">
                <ul>{notes.into_iter().map(|n| view! { <li>{n}</li> }).collect_view()}</ul>
            </dd>
        }
    })
}

/// The last turn's context: this turn's blocks, those held from earlier turns, what the
/// pruning removed, and the sources that failed.
#[component]
fn ContextFacts(report: ContextReport) -> impl IntoView {
    let list = |fact: &'static str, title: &'static str, blocks: Vec<BlockReport>| {
        (!blocks.is_empty()).then(|| {
            view! {
                <dt>{title}</dt>
                <dd data-fact=fact>
                    <ul class="context-blocks">
                        {blocks.into_iter().map(|b| view! { <li>{block_line(&b)}</li> }).collect_view()}
                    </ul>
                </dd>
            }
        })
    };
    view! {
        {list("context", "Context this turn", report.current)}
        {list("context-held", "Context held", report.held)}
        {list("context-pruned", "Context pruned", report.pruned)}
        {(!report.failed.is_empty()).then(|| view! {
            <dt>"Context failed"</dt>
            <dd data-fact="context-failed">
                <ul class="context-blocks">
                    {report.failed.into_iter().map(|f| view! {
                        <li>{format!("{}: {}", f.source, f.error)}</li>
                    }).collect_view()}
                </ul>
            </dd>
        })}
        {report.images_withheld.then(|| view! {
            <dt>"Images"</dt>
            <dd data-fact="images-withheld">"not sent: this model takes no images (placeholders sent)"</dd>
        })}
    }
}

/// "notes.md · text, 120 characters · sent · kept 2 more turns".
fn block_line(block: &BlockReport) -> String {
    let kept = match (block.stored, block.kept_for_good, block.turns_left) {
        (false, _, _) if block.turns_left == Some(0) => "removed".to_owned(),
        (false, _, _) => "not stored".to_owned(),
        (true, true, _) => "kept for good".to_owned(),
        (true, false, Some(0)) => "not sent after this turn".to_owned(),
        (true, false, Some(1)) => "1 more turn".to_owned(),
        (true, false, Some(n)) => format!("{n} more turns"),
        (true, false, None) => "stored".to_owned(),
    };
    let shown = if block.displayed { " · sent" } else { "" };
    format!(
        "{} · {}, {}{shown} · {kept}",
        block.source, block.kind, block.label
    )
}

/// The rolling summary: sent or not, what it covers, its size, and its text on demand.
#[component]
fn SummaryFacts(report: SummaryReport) -> impl IntoView {
    let sent = if report.sent {
        "sent in place of what was left out"
    } else if report.text.is_empty() {
        "none yet"
    } else {
        "not sent (nothing was left out)"
    };
    let updated = match report.updated_ms {
        0 if report.text.is_empty() => String::new(),
        0 => " · not updated by Parlor yet".to_owned(),
        ms => format!(" · updated {}", parlor_domain::transfer::utc_time(ms)),
    };
    view! {
        <dt>"Summary"</dt>
        <dd data-fact="summary">
            {format!(
                "{sent} · covers {} · {} tokens{updated}",
                count_of(report.covers, "message"),
                report.tokens
            )}
            {report.failure.map(|f| view! { <p class="summary-failure">{format!("Last update failed: {f}")}</p> })}
            {report.maintenance.map(|m| view! {
                <p class="summary-maintenance" data-fact="maintenance">
                    {format!(
                        "Maintenance: {} ({}; {} messages, {} bytes; limits {} and {})",
                        m.action, m.reason, m.metrics.messages, m.metrics.approx_bytes,
                        m.thresholds.max_messages, m.thresholds.max_bytes
                    )}
                </p>
            })}
            {(!report.text.is_empty()).then(|| view! {
                <details class="summary-text">
                    <summary>"Show the summary"</summary>
                    <pre>{report.text}</pre>
                </details>
            })}
        </dd>
    }
}
