//! What a watch saw happen to an object, as the indexes take it: the watch's own event type
//! belongs to the client, which the indexes do not use.

/// One event of a watch: an object added or changed, or deleted, or a relist (its start, each
/// object it lists, its end). The indexes take it with the object borrowed, `Event<&Pod>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<K> {
    Apply(K),
    Delete(K),
    /// A relist begins: the objects it lists follow as `InitApply`, then `InitDone`.
    Init,
    InitApply(K),
    /// The relist is complete: whatever it did not list is gone.
    InitDone,
}
