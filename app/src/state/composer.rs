//! The composer: the draft and the files attached to the next message.

use super::ChatState;
use crate::attach::Attachment;
use leptos::prelude::*;

/// What the next message is made of.
#[derive(Clone, Copy)]
pub struct Composer {
    pub draft: RwSignal<String>,
    /// Files attached to the next message.
    pub attachments: RwSignal<Vec<Attachment>>,
    /// Why a file could not be attached (too large, not a text file or an image).
    pub attach_error: RwSignal<Option<String>>,
    /// The largest chat request with images: larger files are refused before uploading.
    pub max_context_bytes: StoredValue<usize>,
}

impl Composer {
    pub fn new(max_context_bytes: usize) -> Self {
        Composer {
            draft: RwSignal::new(String::new()),
            attachments: RwSignal::new(Vec::new()),
            attach_error: RwSignal::new(None),
            max_context_bytes: StoredValue::new(max_context_bytes),
        }
    }

    /// Takes the draft and its attachments to send, leaving the composer empty; `None`
    /// when there is nothing to send or a reply is being written (`busy`).
    pub(super) fn take(&self, busy: RwSignal<bool>) -> Option<(String, Vec<Attachment>)> {
        let text = self.draft.get_untracked();
        if text.trim().is_empty() || busy.get_untracked() {
            return None;
        }
        self.draft.set(String::new());
        let attachments = self.attachments.get_untracked();
        self.attachments.set(Vec::new());
        self.attach_error.set(None);
        Some((text, attachments))
    }

    /// Adds a file once read, or says why it was refused.
    #[cfg(any(feature = "hydrate", test))]
    pub(super) fn attach(&self, attachment: Result<Attachment, String>) {
        match attachment {
            Ok(attachment) => self.attachments.update(|list| list.push(attachment)),
            Err(reason) => self.attach_error.set(Some(reason)),
        }
    }
}

impl ChatState {
    /// Reads files picked or dropped on the composer; each is attached once read, or refused
    /// with a reason.
    #[cfg(feature = "hydrate")]
    pub(crate) fn read_files(self, files: Vec<web_sys::File>) {
        let max = self.composer.max_context_bytes.get_value();
        // A new choice of files: the reason an earlier one was refused no longer applies.
        self.composer.attach_error.set(None);
        for file in files {
            let id = self.transcript.next_key();
            leptos::task::spawn_local(async move {
                self.composer
                    .attach(crate::attach::read(file, id, max).await);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parlor_domain::context::{Block, Save};

    fn file(id: u64) -> Attachment {
        Attachment {
            id,
            name: format!("notes{id}.md"),
            block: Block::Text {
                text: "notes".into(),
            },
            size: 5,
            save: Save::default(),
        }
    }

    #[test]
    fn the_draft_and_its_files_are_taken_once_and_only_when_idle() {
        super::super::tests::reactive();
        let composer = Composer::new(1024);
        let busy = RwSignal::new(false);
        assert_eq!(composer.take(busy), None, "an empty draft is not sent");
        composer.draft.set("  ".into());
        assert_eq!(composer.take(busy), None, "nor a blank one");
        composer.draft.set("Read this".into());
        composer.attach(Ok(file(1)));
        composer.attach(Err("too large".into()));
        assert_eq!(
            composer.attach_error.get_untracked().as_deref(),
            Some("too large")
        );
        busy.set(true);
        assert_eq!(composer.take(busy), None, "not while a reply is written");
        busy.set(false);
        let (text, files) = composer.take(busy).expect("sent");
        assert_eq!((text.as_str(), files), ("Read this", vec![file(1)]));
        assert_eq!(composer.draft.get_untracked(), "");
        assert!(composer.attachments.get_untracked().is_empty());
        assert_eq!(composer.attach_error.get_untracked(), None);
    }
}
