//! `/`: the agents to chat with.

use crate::api::HomeData;
use crate::state::encode;
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn HomePage() -> impl IntoView {
    let data = Resource::new(|| (), |_| load_home());
    view! {
        <Title text="Parlor: agents"/>
        <main class="home">
            <h1>"Parlor"</h1>
            <p class="tagline">"Chat with agents, and see exactly which history each reply was given."</p>
            <Suspense fallback=|| view! { <p>"Loading agents…"</p> }>
                {move || Suspend::new(async move {
                    match data.await {
                        Ok(home) => view! { <AgentList home/> }.into_any(),
                        Err(e) => view! { <p class="error-text">{e.to_string()}</p> }.into_any(),
                    }
                })}
            </Suspense>
        </main>
    }
}

#[component]
fn AgentList(home: HomeData) -> impl IntoView {
    let empty = home.agents.is_empty();
    view! {
        <Show when=move || home.mirror>
            <p class="notice">
                "No model is configured, so replies come from the built-in "
                <strong>"mirror"</strong>
                " model, which describes what it received."
            </p>
        </Show>
        <Show when=move || empty>
            <p>"No agents are loaded. Add "<code>"<id>/template.json"</code>" files to the agents folder."</p>
        </Show>
        <ul class="agents">
            {home
                .agents
                .into_iter()
                .map(|agent| {
                    view! {
                        <li>
                            <a class="agent-card" href=format!("/chat?agent={}", encode(&agent.id))>
                                <span class="agent-name">{agent.name}</span>
                                <span class="agent-description">{agent.description}</span>
                            </a>
                        </li>
                    }
                })
                .collect_view()}
        </ul>
    }
}

/// The home page's data: the agents.
#[server]
pub async fn load_home() -> Result<HomeData, ServerFnError> {
    let backend = use_context::<crate::ssr::BackendHandle>()
        .ok_or_else(|| ServerFnError::new("the page was left before its data was read"))?;
    Ok(backend.0.home().await)
}
