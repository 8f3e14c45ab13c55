//! A turn's writes before its message: an edit's or a regeneration's cut, which keeps what
//! it cuts as a version, then the pruning pass (versions off a message it removes hang off
//! the one before it).

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
            let reparented = self.reparented(decision, prune).await?;
            store.prune(id, prune.offset, &prune.edits).await?;
            if let Some(branches) = reparented {
                let path = store.load(id).await?;
                let change = parlor_domain::branch::Rebranch::keeping(&path, branches);
                if crate::conversation::versions::rebranch(store.as_ref(), id, change)
                    .await?
                    .is_none()
                {
                    tracing::warn!(
                        "{id} changed while its versions were moved off a pruned message"
                    );
                }
            }
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

    /// When the pruning pass removes messages (left with nothing to send) that versions
    /// hang off: the versions as they will hang off the message before each (read before
    /// the pass, which changes the path's positions). Rare: reads the whole path then.
    async fn reparented(
        &self,
        decision: &Decision,
        prune: &parlor_domain::turn::Prune,
    ) -> Result<Option<parlor_domain::branch::Branches>, TurnError> {
        if prune.removed() == 0 {
            return Ok(None);
        }
        let (store, id) = (&self.history.store, &decision.info.session_id);
        let branches = store.branches(id).await?;
        if branches.is_empty() {
            return Ok(None);
        }
        let path = store.load(id).await?;
        let removed: Vec<usize> = prune
            .edits
            .iter()
            .filter(|e| e.new.is_none())
            .map(|e| prune.offset + e.index)
            .collect();
        Ok(branches.reparented(&path, &removed))
    }
}
