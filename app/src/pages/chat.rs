//! `/chat?agent=<id>`: a conversation with one agent (the AgentDock URL form).
//!
//! Query parameters: `session` (which conversation), `historyPolicy` / `historyLength`
//! (forwarded to the chat API, which decides whether they apply), `debug=true`.

use crate::actions::Action;
use crate::api::{ChatHead, ChatPageData, ChatQuery};
use crate::components::{Composer, ContextMeter, MessageList, Sidebar};
use crate::start::ChatStart;
use crate::state::ChatState;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

#[component]
pub fn ChatPage() -> impl IntoView {
    let query = use_query_map();
    let chat_query = Memo::new(move |_| query.with(|q| ChatQuery::from_params(|k| q.get(k))));
    // The page is streamed in order. Its head and status were decided in front of it (see
    // `ChatHead`); the conversation is read and rendered behind the head.
    let head = decided_head();
    let data = Resource::new(move || chat_query.get(), load_chat);
    let conversation = move || {
        view! {
            <Suspense fallback=loading>
                {move || Suspend::new(async move {
                    match data.await {
                        Ok(ChatPageData::Ready(chat)) => {
                            let start = ChatStart { data: *chat, query: chat_query.get_untracked() };
                            let text = start.to_script_text();
                            // The island renders from it here, and reads it from the
                            // element in the browser.
                            provide_context(start);
                            view! {
                                <script type="application/json" id=ChatStart::ELEMENT_ID inner_html=text></script>
                                <ChatView/>
                            }
                            .into_any()
                        }
                        // Gone since the check (deleted meanwhile).
                        Ok(ChatPageData::UnknownAgent(id)) => unknown_agent(id),
                        Ok(ChatPageData::UnknownConversation) => unknown_conversation(),
                        Err(e) => failed(e.to_string()),
                    }
                })}
            </Suspense>
        }
    };
    match head {
        Some(ChatHead::Ready(agent_name)) => view! {
            <Title text=format!("{agent_name} · Parlor")/>
            {conversation()}
        }
        .into_any(),
        Some(ChatHead::UnknownAgent(id)) => unknown_agent(id),
        Some(ChatHead::UnknownConversation) => unknown_conversation(),
        Some(ChatHead::Failed(reason)) => failed(reason),
        // Without the check in front (never in Parlor's server): the conversation alone.
        None => conversation().into_any(),
    }
}

/// The head the server decided for this request (`ChatHead`), if any.
fn decided_head() -> Option<ChatHead> {
    #[cfg(feature = "ssr")]
    {
        use_context::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<ChatHead>().cloned())
    }
    #[cfg(not(feature = "ssr"))]
    {
        None
    }
}

fn loading() -> impl IntoView {
    view! { <p class="page-message">"Loading…"</p> }
}

fn unknown_agent(id: String) -> AnyView {
    view! {
        <main class="page-message">
            <h1>"Unknown agent"</h1>
            <p>"There is no agent called “"{id}"”. "<a href="/">"See the agents"</a></p>
        </main>
    }
    .into_any()
}

fn unknown_conversation() -> AnyView {
    view! {
        <main class="page-message">
            <h1>"Conversation not found"</h1>
            <p>"It does not exist or belongs to another browser. "<a href="/">"Start over"</a></p>
        </main>
    }
    .into_any()
}

fn failed(reason: String) -> AnyView {
    view! { <main class="page-message error-text">{reason}</main> }.into_any()
}

/// What the chat island starts from: on the server, what the page provided; in the
/// browser, the page's `ChatStart` element.
fn chat_start() -> Option<ChatStart> {
    #[cfg(feature = "hydrate")]
    {
        let start = ChatStart::from_page();
        if start.is_none() {
            leptos::logging::error!("Parlor: the chat's data could not be read from the page");
        }
        start
    }
    #[cfg(not(feature = "hydrate"))]
    {
        use_context::<ChatStart>()
    }
}

/// The interactive chat: the only part of Parlor that runs in the browser (an island). It
/// takes no props (see `ChatStart`).
#[island]
fn ChatView() -> impl IntoView {
    // Without its data (a page and a WASM from different builds would do it, which the
    // build's paths rule out) the page stays as the server rendered it.
    let ChatStart { data, query } = chat_start()?;
    let state = ChatState::new(&data, query);
    // Effects run only in the browser, after hydration: mark the page as interactive (the
    // browser tests wait for this before typing).
    Effect::new(|_| {
        if let Some(body) = document().body() {
            let _ = body.set_attribute("data-hydrated", "true");
        }
    });
    let sidebar_open = RwSignal::new(false);
    let agent = data.agent;
    let single = data.models.len() < 2;
    // The models to switch to; without any, the one the conversation shows.
    let choices = if data.models.is_empty() {
        vec![data.model.clone()]
    } else {
        data.models.clone()
    };
    let details = data.model_details.clone();
    Some(view! {
        <div class="layout">
            <Sidebar state open=sidebar_open/>
            <main class="chat" data-agent=agent.id.clone()>
                <header class="chat-head">
                    <button
                        class="menu"
                        aria-label="Conversations"
                        on:click=move |_| sidebar_open.update(|o| *o = !*o)
                    >
                        "☰"
                    </button>
                    <div class="title">
                        <h1>{agent.name.clone()}</h1>
                        {data.forked_from.clone().map(|origin| {
                            let href = format!(
                                "/chat?agent={}&session={}",
                                origin.agent_id, origin.session_id
                            );
                            view! {
                                <a class="forked-from" href=href data-fact="forked-from">
                                    {format!("forked from “{}”", origin.title)}
                                </a>
                            }
                        })}
                        <span class="model" title="Model and provider">
                            // One picker for every case (a second view for a single model
                            // would cost the bundle KBs): with one model it is disabled and
                            // looks like text. Choosing a model sends the `!model` command,
                            // so the notice and the new window show as for a typed one.
                            <select
                                class="model-picker"
                                aria-label="Model"
                                prop:value=move || state.model.get()
                                disabled=move || single || state.streaming.active.get()
                                on:change=move |ev| {
                                    let name = event_target_value(&ev);
                                    if name != state.model.get_untracked() {
                                        state.act(Action::Send(format!("!model {name}")));
                                    }
                                }
                            >
                                {choices
                                    .into_iter()
                                    .enumerate()
                                    .map(|(i, m)| {
                                        // Server-rendered pages show the current model before
                                        // the island hydrates.
                                        let current = m == state.model.get_untracked();
                                        let label = match details.get(i).filter(|d| !d.is_empty()) {
                                            Some(detail) => format!("{m} — {detail}"),
                                            None => m.clone(),
                                        };
                                        view! { <option value=m selected=current>{label}</option> }
                                    })
                                    .collect_view()}
                            </select>
                            " · "
                            {move || state.provider.get()}
                        </span>
                    </div>
                    <ConversationMenu state account=data.account.clone()/>
                    <button class="new-chat" on:click=move |_| state.act(Action::NewChat)>"New chat"</button>
                    <ContextMeter state/>
                </header>
                <Show when=move || data.mirror>
                    <p class="notice mirror-notice">
                        "Offline mode: replies come from Parlor's built-in "<strong>"mirror"</strong>
                        " model, which describes exactly what it received. Configure an LLM to chat for real."
                    </p>
                </Show>
                <MessageList
                    state
                    initial_messages_html=agent.initial_messages_html.clone()
                    chat_prompts=agent.chat_prompts.clone()
                />
                <Composer state agent_name=agent.name.clone()/>
            </main>
            <Show when=move || state.debug.with(Option::is_some)>
                // Rendered by the server (`components::debug_panel`); busy while it is
                // fetched again after a turn.
                // Focusable: where it scrolls (375 px) a keyboard must reach its content.
                <aside
                    class="debug-panel"
                    aria-label="History debug"
                    tabindex="0"
                    aria-busy=move || state.debug_loading.get().to_string()
                    inner_html=move || state.debug.with(|d| d.as_ref().map(|d| d.html.clone()).unwrap_or_default())
                ></aside>
            </Show>
        </div>
    })
}

/// Export the conversation (Markdown, JSON) or import one: a native disclosure, so it opens
/// before the page is interactive too.
#[component]
fn ConversationMenu(state: ChatState, account: Option<String>) -> impl IntoView {
    let failed = RwSignal::new(None::<String>);
    let export = move |format: &str| {
        state.session_id.get().map(|session| {
            format!(
                "{}/sessions/{}/export?format={format}",
                state.agent_url(),
                crate::state::encode(&session)
            )
        })
    };
    view! {
        <details class="conversation-menu">
            <summary aria-label="Menu: export, import, account">"⋯"</summary>
            <div class="menu-items">
                {move || export("md").map(|href| view! {
                    <a href=href download>"Export as Markdown"</a>
                    <a href=export("json").unwrap_or_default() download>"Export as JSON"</a>
                })}
                <label class="import">
                    "Import a conversation…"
                    <input
                        type="file"
                        name="import"
                        accept=".json,application/json"
                        on:change=move |ev| {
                            failed.set(None);
                            read_import(state, ev, failed);
                        }
                    />
                </label>
                {move || failed.get().map(|reason| view! { <p class="menu-error" role="alert">{reason}</p> })}
                {account.map(|name| view! {
                    <div class="menu-account">
                        <p class="menu-user">"Logged in as "<strong>{name}</strong></p>
                        <a href="/account/tokens">"Access tokens"</a>
                        <a href="/account/tools">"Tool credentials"</a>
                        <form method="post" action="/auth/logout">
                            <button type="submit" class="logout">"Log out"</button>
                        </form>
                    </div>
                })}
            </div>
        </details>
    }
}

/// Sends the file picked for import.
fn read_import(state: ChatState, ev: leptos::ev::Event, failed: RwSignal<Option<String>>) {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        let file = ev
            .target()
            .and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok())
            .and_then(|input| input.files())
            .and_then(|files| files.get(0));
        if let Some(file) = file {
            state.act(Action::Import { file, failed });
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (state, ev, failed);
}

/// The chat page's data for its URL, as this browser may see it.
#[server]
pub async fn load_chat(query: ChatQuery) -> Result<ChatPageData, ServerFnError> {
    let backend = use_context::<crate::ssr::BackendHandle>()
        .ok_or_else(|| ServerFnError::new("the page was left before its data was read"))?;
    let browser = crate::ssr::browser_session().await;
    let page = backend
        .0
        .chat(query, browser)
        .await
        .map_err(|e| ServerFnError::new(e.to_string()))?;
    let mut page = page;
    if let ChatPageData::Ready(chat) = &mut page {
        chat.account = crate::ssr::signed_in().await;
        if let (Some(name), Some(meter)) = (&chat.account, chat.meter.as_mut()) {
            meter.today = backend.0.daily_use(name).await;
        }
    }
    if !matches!(page, ChatPageData::Ready(_)) {
        // Present while a page renders; a client that went away mid-render may have taken
        // it with it, and that is no reason to panic.
        if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
            response.set_status(axum::http::StatusCode::NOT_FOUND);
        }
    }
    Ok(page)
}
