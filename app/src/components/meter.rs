//! The context meter in the chat header: how much of the model's window the last call took,
//! part by part, and what it cost. Opens to the numbers behind the bar.
//!
//! The bar and the numbers are HTML made by the domain ([`Meter::face_html`],
//! [`Meter::details_html`]: numbers and fixed labels only), the same on the server and in
//! the browser; the one text from the conversation, the title in the warning, is a text
//! node. A view of each part would cost the browser's bundle about 8 KB.

use crate::state::ChatState;
use leptos::prelude::*;
use parlor_domain::meter::Meter;

#[component]
pub fn ContextMeter(state: ChatState) -> impl IntoView {
    let html = move |f: fn(&Meter) -> String| {
        move || state.meter.with(|m| m.as_ref().map(f).unwrap_or_default())
    };
    let warning = move || state.meter.with(|m| m.as_ref().and_then(Meter::warning));
    view! {
        <div
            class="meter"
            class:hidden=move || state.meter.with(Option::is_none)
            class:near=move || warning().is_some()
            data-sent=move || state.meter.with(|m| m.as_ref().map(|m| m.sent).unwrap_or_default())
        >
            <details>
                <summary title="Context sent on the last turn" inner_html=html(Meter::face_html)></summary>
                <div class="meter-details" inner_html=html(Meter::details_html)></div>
            </details>
            <p class="meter-warning" role="status">{warning}</p>
        </div>
    }
}
