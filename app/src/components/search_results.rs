//! The sidebar's search results, rendered on the server (like the debug panel): the island
//! shows the HTML the search answers with, so none of this is in the browser's WASM.

use crate::api::SearchHit;
use crate::state::encode;
use leptos::prelude::*;
use leptos::tachys::view::RenderHtml;

/// The results' HTML: a list of links, each with its title and matching line.
pub fn render(hits: Vec<SearchHit>) -> String {
    let owner = Owner::new();
    owner.with(|| {
        if hits.is_empty() {
            return view! { <p class="search-empty">"No conversation contains that."</p> }
                .to_html();
        }
        view! {
            <ul class="search-results" aria-label="Search results">
                {hits
                    .into_iter()
                    .map(|hit| {
                        let href = format!(
                            "/chat?agent={}&session={}",
                            encode(&hit.agent_id),
                            encode(&hit.session_id)
                        );
                        let branch = hit.version.is_some().then(|| {
                            view! { <span class="hit-branch">"on another version"</span> }
                        });
                        view! {
                            <li>
                                <a href=href data-agent=hit.agent_id data-session=hit.session_id
                                    data-version=hit.version>
                                    <span class="hit-title">{hit.title}</span>
                                    <span class="hit-line">{hit.line}</span>
                                    {branch}
                                </a>
                            </li>
                        }
                    })
                    .collect_view()}
            </ul>
        }
        .to_html()
    })
}
