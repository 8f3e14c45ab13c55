//! The debug panel's tool facts: the agent's tool servers and their state, the tools the
//! last turn offered, each round's calls, the limit that ended the loop, and how each tool
//! exchange of the history was sent (in full, with stubs, or dropped whole).

use leptos::prelude::*;
use parlor_domain::event::tools::{ServerReport, ToolsReport};
use parlor_domain::exchange::{ExchangeReport, ExchangeSent};
use parlor_domain::tool::LimitReached;

#[component]
pub fn ToolServers(servers: Vec<ServerReport>) -> impl IntoView {
    (!servers.is_empty()).then(|| {
        view! {
            <dt>"Tool servers"</dt>
            <dd data-fact="tool-servers">
                <ul class="tool-servers">
                    {servers.into_iter().map(|s| {
                        let line = format!("{}: {}", s.id, s.state);
                        let warnings = (!s.warnings.is_empty()).then(|| view! {
                            <ul class="tool-warnings">
                                {s.warnings.into_iter().map(|w| view! { <li>{w}</li> }).collect_view()}
                            </ul>
                        });
                        view! { <li data-server=s.id>{line}{warnings}</li> }
                    }).collect_view()}
                </ul>
            </dd>
        }
    })
}

#[component]
pub fn ToolFacts(report: ToolsReport) -> impl IntoView {
    let offered = if report.offered.is_empty() {
        "none".to_owned()
    } else {
        report.offered.join(", ")
    };
    let limit = report.limit.map(|l| {
        let which = match l.reached {
            LimitReached::MaxRounds => "max_rounds",
            LimitReached::MaxCalls => "max_calls",
        };
        view! {
            <dt>"Tool limit"</dt>
            <dd data-fact="tool-limit">{format!("{which} = {} reached: the last call could ask for no tool", l.limit)}</dd>
        }
    });
    // Each model call's tokens as sent (the tools' definitions included, after the
    // budget's stubs): the first call's, then one per round.
    let calls = (!report.call_tokens.is_empty()).then(|| {
        let counts: Vec<String> = report
            .call_tokens
            .iter()
            .map(|&n| parlor_domain::numbers::group_digits(n))
            .collect();
        view! {
            <dt>"Tokens per model call"</dt>
            <dd data-fact="call-tokens">{counts.join(" · ")}</dd>
        }
    });
    view! {
        <dt>"Tools offered"</dt>
        <dd data-fact="tools-offered">{offered}</dd>
        <dt>"Tool rounds"</dt>
        <dd data-fact="tool-rounds">
            {if report.rounds.is_empty() { "none".into_any() } else {
                view! {
                    <ol class="tool-rounds">
                        {report.rounds.into_iter().map(|calls| view! {
                            <li>{calls.into_iter().map(|c| {
                                let outcome = if c.ok { "ok" } else { "error" };
                                format!("{} ({outcome}, {} ms, {} bytes) ", c.tool, c.ms, c.bytes)
                            }).collect::<String>()}</li>
                        }).collect_view()}
                    </ol>
                }.into_any()
            }}
        </dd>
        {calls}
        {limit}
    }
}

#[component]
pub fn ExchangeFacts(exchanges: Vec<ExchangeReport>) -> impl IntoView {
    (!exchanges.is_empty()).then(|| {
        view! {
            <dt>"Tool exchanges"</dt>
            <dd data-fact="exchanges">
                <ul class="exchanges">
                    {exchanges.into_iter().map(|e| {
                        let (state, label) = match e.sent {
                            ExchangeSent::Full => ("full", "sent in full"),
                            ExchangeSent::StubbedByRetention => ("retention", "sent with stubs (retention over)"),
                            ExchangeSent::StubbedByBudget => ("budget", "sent with stubs (token budget)"),
                            ExchangeSent::Dropped => ("dropped", "dropped whole"),
                        };
                        view! {
                            <li data-exchange=state>{format!("#{} {}: {label}", e.at + 1, e.tools.join(", "))}</li>
                        }
                    }).collect_view()}
                </ul>
            </dd>
        }
    })
}
