//! A turn's writes before its message: an edit's or a regeneration's cut, which keeps what
//! it cuts as a version, then the pruning pass.

use super::{TurnContext, TurnError};
use parlor_domain::turn::Decision;

impl TurnContext<'_> {
    /// The writes decided before the message: the cut of an edit or a regeneration, kept as a
    /// version (only of what was read: a message saved since refuses it), then the pruning
    /// pass. Notes the ‹ n/m › of the new version an edit or a regeneration makes.
    pub(super) async fn cut_and_prune(&self, decision: &mut Decision) -> Result<(), TurnError> {
        let (store, id) = (&self.history.store, &decision.info.session_id);
        if let Some(cut) = &decision.cut {
            // What is cut stays as a version beside what follows.
            let change = cut.rebranch(store.branches(id).await?);
            let newest = change.branches.newest(cut.parent.as_deref());
            if crate::conversation::versions::rebranch(store.as_ref(), id, change)
                .await?
                .is_none()
            {
                return Err(TurnError::Changed);
            }
            decision.versions = newest;
        }
        if let Some(prune) = &decision.prune {
            store.prune(id, prune.offset, &prune.edits).await?;
            tracing::debug!(
                "[History] Context pruning in {}: {} block(s) expired, {} message(s) rewritten, \
                 {} removed",
                id,
                prune.expired.len(),
                prune.edits.len() - prune.removed(),
                prune.removed()
            );
        }
        Ok(())
    }
}
