//! The context meter in the chat header: how much of the model's window the last call took,
//! part by part, and what it cost. Opens to the numbers behind the bar.

use crate::state::ChatState;
use leptos::prelude::*;
use parlor_domain::meter::{format_usd, group_digits, per_mille, Meter};

/// The parts of a request, in the order they are sent, with their names and CSS classes.
const PARTS: [(&str, &str); 5] = [
    ("system", "System prompt"),
    ("summary", "Summary"),
    ("history", "History"),
    ("context", "Context blocks"),
    ("message", "New message"),
];

fn part(meter: &Meter, i: usize) -> u64 {
    let p = &meter.parts;
    [p.system, p.summary, p.history, p.context, p.message][i]
}

#[component]
pub fn ContextMeter(state: ChatState) -> impl IntoView {
    move || state.meter.get().map(|meter| view! { <MeterView meter/> })
}

#[component]
fn MeterView(meter: Meter) -> impl IntoView {
    let sent = group_digits(meter.sent);
    let counted = if meter.reported {
        "reported by the provider"
    } else {
        "estimated by Parlor"
    };
    let headline = match meter.window {
        Some(window) => format!("{sent} / {} tokens", group_digits(window)),
        None => format!("{sent} tokens · limit unknown"),
    };
    // The bar's parts are Parlor's count, scaled to the provider's total when it reported
    // one; drawn in thousandths of the window, one after the other.
    let scale = meter.parts.total().max(1);
    let bar = meter.window.map(|window| {
        let mut x = 0;
        let rects = (0..PARTS.len())
            .map(|i| {
                let scaled = u128::from(part(&meter, i)) * u128::from(meter.sent) / u128::from(scale);
                let width = per_mille(scaled as u64, window).min(1000 - x);
                let rect = view! {
                    <rect class=format!("seg seg-{}", PARTS[i].0) x=x.to_string() width=width.to_string() height="10"></rect>
                };
                x += width;
                rect
            })
            .collect_view();
        view! {
            <svg class="meter-bar" viewBox="0 0 1000 10" preserveAspectRatio="none" aria-hidden="true">
                {rects}
            </svg>
        }
    });
    let warning = meter.near_limit.then(|| {
        let next = match &meter.drops_next {
            Some(title) => format!("Near the limit: “{title}” is the next to be left out."),
            None => "Near the limit: older messages will be left out.".to_owned(),
        };
        view! { <p class="meter-warning" role="status">{next}</p> }
    });
    let cost = meter.cost.map(|cost| {
        let turn = cost
            .turn_nano_usd
            .map(format_usd)
            .unwrap_or_else(|| "not reported".into());
        view! {
            <dt>"Cost, this turn"</dt>
            <dd class="meter-cost-turn">{turn}</dd>
            <dt>"Cost, conversation"</dt>
            <dd class="meter-cost-conversation">{format_usd(cost.conversation_nano_usd)}</dd>
        }
    });
    let usage = meter.completion.map(|completion| {
        view! {
            <dt>"Reply"</dt>
            <dd class="meter-completion">{group_digits(completion)}" tokens"</dd>
        }
    });
    let cached = meter.cached.map(|cached| {
        view! {
            <dt>"Cached"</dt>
            <dd class="meter-cached">{group_digits(cached)}" prompt tokens"</dd>
        }
    });
    view! {
        <div class="meter" class:near=meter.near_limit data-sent=meter.sent>
        <details>
            <summary title="Context sent on the last turn">
                {bar}
                <span class="meter-headline">{headline}</span>
            </summary>
            <div class="meter-details">
                <p class="meter-source">{counted}</p>
                <dl>
                    {(0..PARTS.len())
                        .map(|i| {
                            view! {
                                <dt><span class=format!("key key-{}", PARTS[i].0)></span>{PARTS[i].1}</dt>
                                <dd data-part=PARTS[i].0>{group_digits(part(&meter, i))}</dd>
                            }
                        })
                        .collect_view()}
                    {usage}
                    {cached}
                    {cost}
                </dl>
            </div>
        </details>
        {warning}
        </div>
    }
}
