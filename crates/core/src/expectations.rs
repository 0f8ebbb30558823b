//! What the watch cache should show after this controller's own writes.
//!
//! A reconcile that runs before the watch events of the previous one's writes arrive would
//! compare against old slices and write again for nothing. So each write records what it
//! expects (the generation the API server returned, or a slice gone); while the cache is behind
//! those expectations the Service waits for the events instead of writing.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

/// How long a slice this controller created may be missing from the cache before it counts as
/// deleted by someone else (and is restored). Watch events arrive in milliseconds; the bound
/// only matters if the watch lost the creation (a relist that folded it away).
pub const CREATION_GRACE: Duration = Duration::from_secs(10);

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_core::ResourceExt;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    /// The slice exists with at least this generation.
    Generation(i64),
    /// The slice was created at `Instant` with this generation: until the cache shows it (or
    /// [`CREATION_GRACE`] passes), its absence is the cache being behind.
    Created(i64, Instant),
    /// The slice with this uid is gone.
    Gone(String),
}

/// Per Service (`namespace`, `name`): per slice name, what the cache should show.
#[derive(Debug, Default)]
pub struct Expectations {
    services: HashMap<(String, String), Vec<(String, Expect)>>,
}

impl Expectations {
    /// A slice written: `created` when it did not exist before the write.
    pub fn applied(
        &mut self,
        namespace: &str,
        service: &str,
        slice: &str,
        generation: Option<i64>,
        created: bool,
    ) {
        if let Some(generation) = generation {
            let expect = if created {
                Expect::Created(generation, Instant::now())
            } else {
                Expect::Generation(generation)
            };
            self.push(namespace, service, slice, expect);
        }
    }

    pub fn deleted(&mut self, namespace: &str, service: &str, slice: &str, uid: Option<String>) {
        if let Some(uid) = uid {
            self.push(namespace, service, slice, Expect::Gone(uid));
        }
    }

    fn push(&mut self, namespace: &str, service: &str, slice: &str, expect: Expect) {
        let list = self
            .services
            .entry((namespace.to_owned(), service.to_owned()))
            .or_default();
        list.retain(|(name, _)| name != slice);
        list.push((slice.to_owned(), expect));
    }

    /// Whether `existing` (the cache's slices of the Service) is older than this controller's
    /// writes. Expectations the cache has met are forgotten. A slice missing from the cache
    /// counts as met (it may have been deleted by someone, and must then be restored), unless
    /// this controller created it less than [`CREATION_GRACE`] ago.
    pub fn cache_is_stale(
        &mut self,
        namespace: &str,
        service: &str,
        existing: &[Arc<EndpointSlice>],
    ) -> bool {
        self.cache_is_stale_at(namespace, service, existing, Instant::now())
    }

    fn cache_is_stale_at(
        &mut self,
        namespace: &str,
        service: &str,
        existing: &[Arc<EndpointSlice>],
        now: Instant,
    ) -> bool {
        let key = (namespace.to_owned(), service.to_owned());
        let Some(list) = self.services.get_mut(&key) else {
            return false;
        };
        list.retain(|(name, expect)| {
            let current = existing.iter().find(|s| s.name_any() == *name);
            match (expect, current) {
                (Expect::Generation(want) | Expect::Created(want, _), Some(slice)) => {
                    slice.metadata.generation.unwrap_or(0) < *want
                }
                (Expect::Gone(uid), Some(slice)) => slice.uid().as_deref() == Some(uid.as_str()),
                (Expect::Created(_, at), None) => {
                    now.saturating_duration_since(*at) < CREATION_GRACE
                }
                (_, None) => false,
            }
        });
        let stale = !list.is_empty();
        if !stale {
            self.services.remove(&key);
        }
        stale
    }

    /// Whether a watch event of `slice` (`deleted` or created/updated) shows exactly what this
    /// controller last wrote or deleted for the Service: then the event needs no new plan.
    pub fn is_own_write(
        &self,
        namespace: &str,
        service: &str,
        slice: &EndpointSlice,
        deleted: bool,
    ) -> bool {
        let key = (namespace.to_owned(), service.to_owned());
        let name = slice.name_any();
        self.services.get(&key).is_some_and(|list| {
            list.iter().any(|(n, expect)| {
                *n == name
                    && match expect {
                        Expect::Generation(g) | Expect::Created(g, _) => {
                            !deleted && slice.metadata.generation == Some(*g)
                        }
                        Expect::Gone(uid) => {
                            deleted && slice.uid().as_deref() == Some(uid.as_str())
                        }
                    }
            })
        })
    }

    /// Like [`Self::is_own_write`], and a write the cache now shows is no longer expected.
    pub fn met(
        &mut self,
        namespace: &str,
        service: &str,
        slice: &EndpointSlice,
        deleted: bool,
    ) -> bool {
        if !self.is_own_write(namespace, service, slice, deleted) {
            return false;
        }
        let key = (namespace.to_owned(), service.to_owned());
        if let Some(list) = self.services.get_mut(&key) {
            let name = slice.name_any();
            list.retain(|(n, _)| *n != name);
            if list.is_empty() {
                self.services.remove(&key);
            }
        }
        true
    }

    /// Forgets a Service (deleted or no longer managed).
    pub fn forget(&mut self, namespace: &str, service: &str) {
        self.services
            .remove(&(namespace.to_owned(), service.to_owned()));
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

    #[test]
    fn the_cache_is_stale_until_it_shows_the_written_generation() {
        let mut e = Expectations::default();
        assert!(!e.cache_is_stale("ns", "web", &[]));
        e.applied("ns", "web", "web-ipv4-0", Some(3), false);
        assert!(e.cache_is_stale("ns", "web", &[slice("web-ipv4-0", "u", 2)]));
        assert!(
            !e.cache_is_stale("ns", "other", &[slice("web-ipv4-0", "u", 2)]),
            "per Service"
        );
        assert!(!e.cache_is_stale("ns", "web", &[slice("web-ipv4-0", "u", 3)]));
        // Met expectations are forgotten: an older generation later is someone else's doing.
        assert!(!e.cache_is_stale("ns", "web", &[slice("web-ipv4-0", "u", 1)]));
    }

    #[test]
    fn a_deleted_slice_is_stale_while_the_cache_still_has_it() {
        let mut e = Expectations::default();
        e.deleted("ns", "web", "web-ipv4-1", Some("u1".into()));
        assert!(e.cache_is_stale("ns", "web", &[slice("web-ipv4-1", "u1", 1)]));
        // Re-created by someone (another uid): not ours to wait for.
        assert!(!e.cache_is_stale("ns", "web", &[slice("web-ipv4-1", "u2", 1)]));
    }

    #[test]
    fn a_slice_missing_from_the_cache_is_not_waited_for() {
        let mut e = Expectations::default();
        e.applied("ns", "web", "web-ipv4-0", Some(1), false);
        assert!(
            !e.cache_is_stale("ns", "web", &[]),
            "it may have been deleted: restore it"
        );
        e.applied("ns", "web", "web-ipv4-0", Some(5), false);
        e.forget("ns", "web");
        assert!(!e.cache_is_stale("ns", "web", &[slice("web-ipv4-0", "u", 1)]));
    }

    #[test]
    fn own_writes_are_told_apart_from_other_changes() {
        let mut e = Expectations::default();
        e.applied("ns", "web", "web-ipv4-0", Some(4), false);
        e.deleted("ns", "web", "web-ipv4-1", Some("u1".into()));
        assert!(e.is_own_write("ns", "web", &slice("web-ipv4-0", "u", 4), false));
        assert!(
            !e.is_own_write("ns", "web", &slice("web-ipv4-0", "u", 5), false),
            "edited after the write"
        );
        assert!(
            !e.is_own_write("ns", "web", &slice("web-ipv4-0", "u", 4), true),
            "deleted by someone: to be restored"
        );
        assert!(e.is_own_write("ns", "web", &slice("web-ipv4-1", "u1", 1), true));
        assert!(!e.is_own_write("ns", "web", &slice("web-ipv4-2", "u2", 1), false));
        assert!(!e.is_own_write("ns", "other", &slice("web-ipv4-0", "u", 4), false));
    }

    #[test]
    fn a_slice_just_created_is_waited_for_until_the_cache_shows_it_or_the_grace_ends() {
        let mut e = Expectations::default();
        let now = Instant::now();
        e.applied("ns", "web", "web-ipv4-0", Some(1), true);
        assert!(
            e.cache_is_stale_at("ns", "web", &[], now),
            "not in the cache yet: the creation's watch event is on its way"
        );
        assert!(!e.cache_is_stale_at("ns", "web", &[slice("web-ipv4-0", "u", 1)], now));
        // Seen once, then gone: someone deleted it.
        assert!(!e.cache_is_stale_at("ns", "web", &[], now));

        e.applied("ns", "web", "web-ipv4-0", Some(1), true);
        let later = Instant::now() + CREATION_GRACE;
        assert!(
            !e.cache_is_stale_at("ns", "web", &[], later),
            "never seen within the grace: restore it"
        );
    }
}
