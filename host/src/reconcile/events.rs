//! Warning Events on Services, each with the note it was published with.
//!
//! kube's [`Recorder`] folds an Event into the series of the last one of the same reason and
//! action on the same object, keeping the first note (as client-go does): a Service whose
//! problem changes (another plugin failure, another invalid field) would show the old text.
//! Here a Service's reason gets a recorder of its own, replaced when the note changes, so the
//! same note repeats as a series and a new note is a new Event.

use nad_model::input::service_record::ServiceRecord;
use nad_model::reason::{Action, Reason};
use nad_model::service_ref::ServiceRef;
use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
};

use kube::{
    Client, Resource, ResourceExt,
    runtime::events::{Event, EventType, Recorder, Reporter},
};

use nad_process::kube_error::describe;

/// The most an Event's note may hold.
const NOTE_LIMIT: usize = 1024;
/// The most Services and reasons remembered; past it all are forgotten at once (their next
/// Event starts a new series), so Services deleted long ago do not hold memory.
const REMEMBERED: usize = 4096;

type Key = (ServiceRef, Reason);

pub struct Events {
    client: Client,
    reporter: Reporter,
    /// Per Service and reason: the last note and the recorder that holds its series.
    last: Mutex<HashMap<Key, (String, Recorder)>>,
}

impl Events {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            last: Mutex::default(),
        }
    }

    /// Publishes a Warning Event on the Service; a failure to publish is logged, not fatal.
    /// Returns whether it was published.
    pub async fn warn(
        &self,
        service: &ServiceRecord,
        reason: Reason,
        action: Action,
        note: String,
    ) -> bool {
        let note = truncate(note, NOTE_LIMIT);
        let recorder = {
            let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
            let key = (ServiceRef::of(service), reason);
            match last.get(&key) {
                Some((previous, recorder)) if *previous == note => recorder.clone(),
                _ => {
                    if last.len() >= REMEMBERED {
                        last.clear();
                    }
                    let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
                    last.insert(key, (note.clone(), recorder.clone()));
                    recorder
                }
            }
        };
        let event = Event {
            type_: EventType::Warning,
            reason: reason.as_str().to_owned(),
            note: Some(note),
            action: action.as_str().to_owned(),
            secondary: None,
        };
        match recorder.publish(&event, &service.object_ref(&())).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(service = %service.name_any(), %reason, error = %describe(&e), "could not publish Event");
                false
            }
        }
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max - 3;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_event_notes_are_cut() {
        assert_eq!(truncate("abcdef".into(), 5), "ab...");
        assert_eq!(truncate("abc".into(), 5), "abc");
    }
}
