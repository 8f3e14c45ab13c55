//! Files attached to a message: read in the browser (text as text, images as `data:` URLs,
//! never decoded, so the WASM stays small), each sent as one context entry with the
//! retention the user picked.

use parlor_domain::context::{Block, ContextEntry, Save, IMAGE_TYPES, MAX_SOURCE_CHARS};
use std::num::NonZeroU32;

/// The largest text file the composer attaches: requests without images are at most 1 MiB.
pub const MAX_TEXT_BYTES: u64 = 512 * 1024;

/// A file waiting in the composer.
#[derive(Clone, Debug, PartialEq)]
pub struct Attachment {
    pub id: u64,
    pub name: String,
    pub block: Block,
    pub size: u64,
    pub save: Save,
}

impl Attachment {
    /// The context entry sent for it: the file's name is the source.
    pub fn entry(&self) -> ContextEntry {
        ContextEntry {
            source: source_name(&self.name),
            blocks: vec![self.block.clone()],
            display: true,
            save: self.save,
        }
    }

    pub fn is_image(&self) -> bool {
        matches!(self.block, Block::Image { .. })
    }
}

/// A file name as a context source: printable, at most 64 characters.
fn source_name(name: &str) -> String {
    let clean: String = name
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_SOURCE_CHARS)
        .collect();
    if clean.is_empty() {
        "attachment".into()
    } else {
        clean
    }
}

/// The retention picker's choices: (value, label).
pub const CHOICES: [(&str, &str); 6] = [
    ("0", "this message only"),
    ("1", "next 1 turn"),
    ("2", "next 2 turns"),
    ("3", "next 3 turns"),
    ("5", "next 5 turns"),
    ("always", "always"),
];

/// The retention a picker value stands for.
pub fn save_of(value: &str) -> Save {
    match value {
        "always" => Save::Always,
        n => n
            .parse::<u32>()
            .ok()
            .and_then(NonZeroU32::new)
            .map_or(Save::No, Save::Turns),
    }
}

/// The picker value of a retention.
pub fn value_of(save: Save) -> String {
    match save {
        Save::No => "0".into(),
        Save::Always => "always".into(),
        Save::Turns(n) => n.to_string(),
    }
}

/// What a file can be attached as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Text,
    Image,
}

/// Text, code and Markdown files (by type, else by name), and PNG, JPEG, GIF and WebP
/// images; `None` for anything else.
pub fn classify(name: &str, mime: &str) -> Option<Kind> {
    if IMAGE_TYPES.contains(&mime) {
        return Some(Kind::Image);
    }
    const TEXT_TYPES: [&str; 6] = [
        "application/json",
        "application/xml",
        "application/javascript",
        "application/toml",
        "application/x-sh",
        "application/yaml",
    ];
    const TEXT_EXTENSIONS: [&str; 28] = [
        "txt", "md", "markdown", "log", "csv", "tsv", "json", "toml", "yaml", "yml", "xml", "html",
        "css", "js", "ts", "rs", "py", "go", "java", "c", "h", "cpp", "rb", "sh", "sql", "ini",
        "cfg", "conf",
    ];
    let extension = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    let text = mime.starts_with("text/")
        || TEXT_TYPES.contains(&mime)
        || extension.is_some_and(|e| TEXT_EXTENSIONS.contains(&e.as_str()));
    text.then_some(Kind::Text)
}

/// Refuses a file before it is read or uploaded: of a kind Parlor cannot send, or too
/// large. Images travel base64-encoded (a third larger) in a request of at most
/// `max_context_bytes`.
pub fn check(name: &str, mime: &str, size: u64, max_context_bytes: usize) -> Result<Kind, String> {
    let kind = classify(name, mime).ok_or_else(|| {
        format!("{name}: only text files (text, code, Markdown) and PNG, JPEG, GIF or WebP images can be attached")
    })?;
    let limit = match kind {
        Kind::Text => MAX_TEXT_BYTES,
        Kind::Image => (max_context_bytes as u64 / 4 * 3).saturating_sub(64 * 1024),
    };
    if size > limit {
        return Err(format!(
            "{name} is {}; {} can be at most {}",
            size_label(size),
            if kind == Kind::Text {
                "text files"
            } else {
                "images"
            },
            size_label(limit)
        ));
    }
    Ok(kind)
}

/// "12 KB", "3.4 MB" (integer arithmetic: formatting a float would bring the float
/// formatting code into the browser's bundle).
pub fn size_label(bytes: u64) -> String {
    const MB: u64 = 1024 * 1024;
    if bytes < MB {
        format!("{} KB", bytes.div_ceil(1024))
    } else {
        // Tenths of a megabyte, rounded to the nearest.
        let tenths = (bytes * 10 + MB / 2) / MB;
        format!("{}.{} MB", tenths / 10, tenths % 10)
    }
}

/// Reads a file the user picked or dropped.
#[cfg(feature = "hydrate")]
pub async fn read(
    file: web_sys::File,
    id: u64,
    max_context_bytes: usize,
) -> Result<Attachment, String> {
    let file = gloo_file::File::from(file);
    let name = file.name();
    let size = file.size();
    let kind = check(&name, &file.raw_mime_type(), size, max_context_bytes)?;
    let failed = |e: gloo_file::FileReadError| format!("{name} could not be read: {e}");
    let block = match kind {
        Kind::Text => Block::Text {
            text: gloo_file::futures::read_as_text(&file)
                .await
                .map_err(failed)?,
        },
        Kind::Image => Block::Image {
            url: gloo_file::futures::read_as_data_url(&file)
                .await
                .map_err(failed)?,
        },
    };
    Ok(Attachment {
        id,
        name,
        block,
        size,
        save: Save::No,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_code_markdown_and_the_four_image_types_are_accepted() {
        assert_eq!(classify("notes.md", ""), Some(Kind::Text));
        assert_eq!(
            classify("main.RS", "application/octet-stream"),
            Some(Kind::Text)
        );
        assert_eq!(classify("data", "application/json"), Some(Kind::Text));
        assert_eq!(classify("a.log", "text/plain"), Some(Kind::Text));
        assert_eq!(classify("shot.png", "image/png"), Some(Kind::Image));
        assert_eq!(classify("shot.svg", "image/svg+xml"), None);
        assert_eq!(classify("archive.zip", "application/zip"), None);
    }

    #[test]
    fn large_files_are_refused_before_upload_with_the_limit() {
        let ten_mb = 10 * 1024 * 1024;
        assert!(check("a.txt", "text/plain", 100, ten_mb).is_ok());
        let error = check("a.txt", "text/plain", 600 * 1024, ten_mb).unwrap_err();
        assert_eq!(error, "a.txt is 600 KB; text files can be at most 512 KB");
        assert!(check("p.png", "image/png", 7 * 1024 * 1024, ten_mb).is_ok());
        let error = check("p.png", "image/png", 8 * 1024 * 1024, ten_mb).unwrap_err();
        assert!(
            error.starts_with("p.png is 8.0 MB; images can be at most 7.4 MB"),
            "{error}"
        );
        assert!(check("x.zip", "application/zip", 1, ten_mb)
            .unwrap_err()
            .contains("only text files"));
    }

    #[test]
    fn sizes_read_in_kilobytes_or_tenths_of_megabytes() {
        assert_eq!(size_label(1), "1 KB");
        assert_eq!(size_label(600 * 1024), "600 KB");
        assert_eq!(size_label(1024 * 1024), "1.0 MB");
        assert_eq!(size_label(1024 * 1024 + 1024 * 1024 / 4), "1.3 MB");
        assert_eq!(size_label(7_760_000), "7.4 MB");
        assert_eq!(size_label(10 * 1024 * 1024 - 1), "10.0 MB");
    }

    #[test]
    fn the_picker_values_round_trip_and_the_entry_names_the_file() {
        for (value, _) in CHOICES {
            assert_eq!(value_of(save_of(value)), value);
        }
        let a = Attachment {
            id: 0,
            name: "x".repeat(70),
            block: Block::Text { text: "t".into() },
            size: 1,
            save: save_of("2"),
        };
        let entry = a.entry();
        assert_eq!(entry.source.chars().count(), 64);
        assert_eq!(entry.validate(0), Ok(()));
        assert!(entry.display);
    }
}
