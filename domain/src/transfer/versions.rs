//! The versions an import brings (a Parlor export's `branches`), checked before anything is
//! stored.

use super::{first_unpaired, ImportError, Imported};
use crate::conversation_id::ConversationId;

/// How many versions an import may bring.
pub const MOST_BRANCHES: usize = 10_000;

/// The versions of an import: at most [`MOST_BRANCHES`], every message with its id, ids
/// that the API can name (as session ids: 1–128 of `A-Z a-z 0-9 - _ .`, not starting with
/// `.`), each version leading back to the path, no id twice.
pub(super) fn check(imported: &mut Imported) -> Result<(), ImportError> {
    let count = imported.branches.branches.len();
    if count > MOST_BRANCHES {
        return Err(ImportError::BadExport(format!(
            "{count} versions; an import brings at most {MOST_BRANCHES}"
        )));
    }
    for (index, branch) in imported.branches.branches.iter_mut().enumerate() {
        if let Some(at) = first_unpaired(&branch.messages) {
            return Err(ImportError::BadBranch {
                index: index + 1,
                reason: format!(
                    "message {}: a tool call without all its results, or a result without \
                     its call, right after it",
                    at + 1
                ),
            });
        }
        for message in &mut branch.messages {
            message.ensure_id();
        }
        if let Some(parent) = branch.parent.as_deref().filter(|p| !nameable(p)) {
            return Err(ImportError::BadBranch {
                index: index + 1,
                reason: format!(
                    "its parent {:?} is not a message id",
                    crate::branch::shortened(parent)
                ),
            });
        }
    }
    let path = imported.messages.iter();
    let all = path.chain(imported.branches.branches.iter().flat_map(|b| &b.messages));
    if let Some(bad) = all.map(|m| m.id()).find(|id| !nameable(id)) {
        return Err(ImportError::BadExport(format!(
            "message id {:?}: an id is 1–128 of A-Z a-z 0-9 - _ . (not starting with .)",
            crate::branch::shortened(&bad)
        )));
    }
    match imported.branches.problems(&imported.messages).first() {
        Some(problem) => Err(ImportError::BadExport(format!("its versions: {problem}"))),
        None => Ok(()),
    }
}

/// Whether an id can be named in a URL of the API (the session id's rule).
fn nameable(id: &str) -> bool {
    ConversationId::parse(id).is_ok()
}
