//! The versions an import brings (a Parlor export's `branches`), checked before anything is
//! stored.

use super::{first_unpaired, ImportError, Imported};

/// The versions of an import: every message with its id, each version leading back to the
/// path, no id twice.
pub(super) fn check(imported: &mut Imported) -> Result<(), ImportError> {
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
    }
    match imported.branches.problems(&imported.messages).first() {
        Some(problem) => Err(ImportError::BadExport(format!("its versions: {problem}"))),
        None => Ok(()),
    }
}
