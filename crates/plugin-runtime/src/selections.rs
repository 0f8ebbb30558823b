//! What a plugin declares that every pod it includes for a Service has (`candidate-labels`,
//! since 1.4) is asked once per version of the Service and configuration, then kept here
//! ([`Plugin::selection`](crate::Plugin::selection) asks).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use nad_model::selection::Selection;

/// The interface a 1.4 plugin may export to declare the labels its Services select on.
pub(crate) const INTERFACE: &str = "isim:nad-endpoints/candidate-labels@";

/// Answers kept at most per plugin: one for each of 10 000 Services is about 1 MB. Past it,
/// all of them are forgotten at once and asked again as Services come.
const KEPT_AT_MOST: usize = 16_384;

/// A plugin's answers, by a 64-bit hash of the Service's record and the configuration
/// ([`crate::service::key`]): the chance that two of 16 384 answers share one is about 10^-11.
#[derive(Debug, Default)]
pub(crate) struct Kept(Mutex<HashMap<u64, Arc<Selection>>>);

impl Kept {
    pub(crate) fn get(&self, key: u64) -> Option<Arc<Selection>> {
        self.lock().get(&key).cloned()
    }

    pub(crate) fn keep(&self, key: u64, selection: Arc<Selection>) {
        let mut kept = self.lock();
        if kept.len() >= KEPT_AT_MOST {
            kept.clear();
        }
        kept.insert(key, selection);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Selection>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
