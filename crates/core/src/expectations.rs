//! What the watch cache should show after this controller's own writes.
//!
//! A reconcile that runs before the watch events of the previous one's writes arrive would
//! compare against old slices and write again for nothing. So each write records what it
//! expects (the generation the API server returned, or a slice gone); while the cache is behind
//! those expectations the Service waits for the events instead of writing.

use std::sync::Arc;

use k8s_openapi::{
    api::discovery::v1::EndpointSlice,
    jiff::{SignedDuration, Timestamp},
};
use kube_core::ResourceExt;

/// How long a slice this controller created may be missing from the cache before it counts as
/// deleted by someone else (and is restored). Watch events arrive in milliseconds; the bound
/// only matters if the watch lost the creation (a relist that folded it away).
pub const CREATION_GRACE: SignedDuration = SignedDuration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    /// The slice exists with at least this generation.
    Generation(i64),
    /// The slice was created at this time with this generation: until the cache shows it (or
    /// [`CREATION_GRACE`] passes), its absence is the cache being behind.
    Created(i64, Timestamp),
    /// The slice with this uid is gone.
    Gone(String),
}

/// One Service's expectations: per slice name, what the cache should show.
#[derive(Debug, Default)]
pub struct Expectations(Vec<(String, Expect)>);

impl Expectations {
    /// A slice written at `at`: `created` when it did not exist before the write.
    pub fn applied(&mut self, slice: &str, generation: Option<i64>, created: bool, at: Timestamp) {
        if let Some(generation) = generation {
            let expect = if created {
                Expect::Created(generation, at)
            } else {
                Expect::Generation(generation)
            };
            self.push(slice, expect);
        }
    }

    pub fn deleted(&mut self, slice: &str, uid: Option<String>) {
        if let Some(uid) = uid {
            self.push(slice, Expect::Gone(uid));
        }
    }

    fn push(&mut self, slice: &str, expect: Expect) {
        self.0.retain(|(name, _)| name != slice);
        self.0.push((slice.to_owned(), expect));
    }

    /// Whether `existing` (the cache's slices of the Service) is older than this controller's
    /// writes, at `now`. Expectations the cache has met are forgotten. A slice missing from the
    /// cache counts as met (it may have been deleted by someone, and must then be restored),
    /// unless this controller created it less than [`CREATION_GRACE`] ago.
    pub fn cache_is_stale(&mut self, existing: &[Arc<EndpointSlice>], now: Timestamp) -> bool {
        self.0.retain(|(name, expect)| {
            let current = existing.iter().find(|s| s.name_any() == *name);
            match (expect, current) {
                (Expect::Generation(want) | Expect::Created(want, _), Some(slice)) => {
                    slice.metadata.generation.unwrap_or(0) < *want
                }
                (Expect::Gone(uid), Some(slice)) => slice.uid().as_deref() == Some(uid.as_str()),
                (Expect::Created(_, at), None) => now.duration_since(*at) < CREATION_GRACE,
                (_, None) => false,
            }
        });
        !self.0.is_empty()
    }

    /// Whether a watch event of `slice` (`deleted` or created/updated) shows exactly what this
    /// controller last wrote or deleted for the Service: then the event needs no new plan.
    pub fn is_own_write(&self, slice: &EndpointSlice, deleted: bool) -> bool {
        let name = slice.name_any();
        self.0.iter().any(|(n, expect)| {
            *n == name
                && match expect {
                    Expect::Generation(g) | Expect::Created(g, _) => {
                        !deleted && slice.metadata.generation == Some(*g)
                    }
                    Expect::Gone(uid) => deleted && slice.uid().as_deref() == Some(uid.as_str()),
                }
        })
    }

    /// Like [`Self::is_own_write`], and a write the cache now shows is no longer expected.
    pub fn met(&mut self, slice: &EndpointSlice, deleted: bool) -> bool {
        if !self.is_own_write(slice, deleted) {
            return false;
        }
        let name = slice.name_any();
        self.0.retain(|(n, _)| *n != name);
        true
    }

    /// Nothing is expected.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(name: &str, uid: &str, generation: i64) -> Arc<EndpointSlice> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "uid": uid, "generation": generation},
                "addressType": "IPv4", "endpoints": []
            }))
            .unwrap(),
        )
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    #[test]
    fn the_cache_is_stale_until_it_shows_the_written_generation() {
        let mut e = Expectations::default();
        assert!(!e.cache_is_stale(&[], at(0)));
        e.applied("web-ipv4-0", Some(3), false, at(0));
        assert!(e.cache_is_stale(&[slice("web-ipv4-0", "u", 2)], at(0)));
        assert!(!e.cache_is_stale(&[slice("web-ipv4-0", "u", 3)], at(0)));
        // Met expectations are forgotten: an older generation later is someone else's doing.
        assert!(!e.cache_is_stale(&[slice("web-ipv4-0", "u", 1)], at(0)));
        assert!(e.is_empty());
    }

    #[test]
    fn a_deleted_slice_is_stale_while_the_cache_still_has_it() {
        let mut e = Expectations::default();
        e.deleted("web-ipv4-1", Some("u1".into()));
        assert!(e.cache_is_stale(&[slice("web-ipv4-1", "u1", 1)], at(0)));
        // Re-created by someone (another uid): not ours to wait for.
        assert!(!e.cache_is_stale(&[slice("web-ipv4-1", "u2", 1)], at(0)));
    }

    #[test]
    fn a_slice_missing_from_the_cache_is_not_waited_for() {
        let mut e = Expectations::default();
        e.applied("web-ipv4-0", Some(1), false, at(0));
        assert!(
            !e.cache_is_stale(&[], at(0)),
            "it may have been deleted: restore it"
        );
    }

    #[test]
    fn own_writes_are_told_apart_from_other_changes() {
        let mut e = Expectations::default();
        e.applied("web-ipv4-0", Some(4), false, at(0));
        e.deleted("web-ipv4-1", Some("u1".into()));
        assert!(e.is_own_write(&slice("web-ipv4-0", "u", 4), false));
        assert!(
            !e.is_own_write(&slice("web-ipv4-0", "u", 5), false),
            "edited after the write"
        );
        assert!(
            !e.is_own_write(&slice("web-ipv4-0", "u", 4), true),
            "deleted by someone: to be restored"
        );
        assert!(e.is_own_write(&slice("web-ipv4-1", "u1", 1), true));
        assert!(!e.is_own_write(&slice("web-ipv4-2", "u2", 1), false));
        assert!(e.met(&slice("web-ipv4-0", "u", 4), false));
        assert!(
            !e.is_own_write(&slice("web-ipv4-0", "u", 4), false),
            "met once"
        );
    }

    #[test]
    fn a_slice_just_created_is_waited_for_until_the_cache_shows_it_or_the_grace_ends() {
        let mut e = Expectations::default();
        e.applied("web-ipv4-0", Some(1), true, at(0));
        assert!(
            e.cache_is_stale(&[], at(1)),
            "not in the cache yet: the creation's watch event is on its way"
        );
        assert!(!e.cache_is_stale(&[slice("web-ipv4-0", "u", 1)], at(1)));
        // Seen once, then gone: someone deleted it.
        assert!(!e.cache_is_stale(&[], at(1)));

        e.applied("web-ipv4-0", Some(1), true, at(0));
        assert!(
            !e.cache_is_stale(&[], at(0) + CREATION_GRACE),
            "never seen within the grace: restore it"
        );
    }
}
