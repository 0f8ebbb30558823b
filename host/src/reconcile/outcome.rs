//! A reconcile's effects as one value: what its step decided and its writes did, and so the
//! Book entry, figures, log lines and Events that follow. Built without I/O from the step's
//! result and the write's answer; the Book records [`Outcome::entry`] in one call and
//! [`super::publish`] tells the rest.

use std::{collections::BTreeSet, sync::Arc};

use k8s_openapi::{api::discovery::v1::EndpointSlice, jiff::Timestamp};
use kube::ResourceExt;
use nad_core::{
    book::{Entry, Wrote},
    decide::Remembered,
    plan::Desired,
    slices::Changes,
    step::Plan,
    validate::Violation,
};
use nad_model::reason::{Action, Reason};
use nad_plugin_policy::{PluginCall, Record};
use nad_process::kube_error::describe;

use crate::{
    apply::{self, Written},
    error::Error,
    metrics::{services::Problem, sync::Figures},
};

/// What a reconcile did, and so what follows it.
#[derive(Debug, Default)]
pub struct Outcome {
    /// What the Book records of it.
    pub entry: Entry,
    pub ended: Ended,
    /// What to tell the operator that is known before the Book's record (the findings to tell
    /// are those the Book has not seen before).
    pub notices: Vec<Notice>,
    /// The Service's problems, when the reconcile evaluated its inputs.
    pub problems: BTreeSet<Problem>,
    /// The plugin the Service names (a plugin failure's problem names it).
    pub plugin: String,
    /// The Service's network (the findings' notes name it).
    pub network: String,
    pub counts: Counts,
}

/// How a reconcile ended.
#[derive(Debug, Default)]
pub enum Ended {
    /// The cache is behind this controller's writes: the watch events on their way trigger
    /// the reconcile again.
    #[default]
    Stale,
    /// The Service is not this controller's (any more): `invalid` when it cannot be served.
    Released { invalid: bool },
    /// Nothing to plan.
    Unchanged,
    /// Planned, its slices kept or written: `outdated` when writes were not made because their
    /// slices changed since they were planned.
    Planned { outdated: bool },
    /// Failed: the slices stay as last applied, and kube's error policy retries.
    Failed(Error),
}

/// What the metrics count of a reconcile.
#[derive(Debug, Default)]
pub struct Counts {
    /// Endpoints the Service's slices in the cache publish, read when the cache was current.
    pub published: Option<usize>,
    pub calls: Vec<PluginCall>,
    /// The plugin whose failure the built-in one decided for.
    pub fell_back: Option<String>,
    pub planned: Option<Planned>,
    pub written: Option<Writes>,
    /// Slices held back before the write: the API would refuse them.
    pub held_back: usize,
}

/// The log line a reconcile's writes get.
#[derive(Debug, PartialEq, Eq)]
pub enum WritesLine {
    /// A plan's slices written: the endpoints planned, the slices applied, deleted, refused.
    Updated {
        endpoints: usize,
        applied: usize,
        deleted: usize,
        refused: usize,
    },
    /// The slices of a Service released: deleted, and whether it was invalid.
    Removed { deleted: usize, invalid: bool },
    /// A plan with nothing to write.
    UpToDate { endpoints: usize },
}

impl Counts {
    /// The log line of the writes of a reconcile that ended as `ended`: none when it failed
    /// (its failure is what is logged) or planned nothing.
    pub fn writes_line(&self, ended: &Ended) -> Option<WritesLine> {
        let endpoints = self.planned.as_ref().map_or(0, |p| p.endpoints);
        match (&self.written, ended) {
            (_, Ended::Failed(_)) => None,
            (Some(written), Ended::Released { invalid }) => Some(WritesLine::Removed {
                deleted: written.deleted,
                invalid: *invalid,
            }),
            (Some(written), _) => Some(WritesLine::Updated {
                endpoints,
                applied: written.applied,
                deleted: written.deleted,
                refused: written.refused,
            }),
            (None, _) if self.planned.is_some() => Some(WritesLine::UpToDate { endpoints }),
            (None, _) => None,
        }
    }

    /// When the change the writes published happened, for the flip latency: only for writes
    /// that moved something, in a reconcile that did not fail.
    pub fn flipped_at(&self, ended: &Ended) -> Option<Timestamp> {
        let written = self.written.as_ref()?;
        if matches!(ended, Ended::Failed(_)) || written.applied + written.deleted == 0 {
            return None;
        }
        self.planned.as_ref()?.changed_at
    }
}

/// The figures of a plan.
#[derive(Debug, Default)]
pub struct Planned {
    pub added: usize,
    pub removed: usize,
    pub figures: Figures,
    /// Endpoints the plan publishes.
    pub endpoints: usize,
    /// When the earliest change it applies happened.
    pub changed_at: Option<Timestamp>,
}

/// The figures of the writes.
#[derive(Debug, Default)]
pub struct Writes {
    pub applied: usize,
    pub created: usize,
    pub deleted: usize,
    /// Refused by the API server (`422`).
    pub refused: usize,
}

/// Something to tell the operator: a log line, and for most a Warning Event on the Service.
#[derive(Debug, PartialEq, Eq)]
pub enum Notice {
    /// The latest version of the Service's plugin did not load: why, and what serves.
    PluginLoadFailed(String),
    /// The Service's plugin failed and the built-in one decided instead: why.
    PluginFellBack(String),
    /// The Service cannot be served: each problem.
    InvalidService(Vec<String>),
    /// A slice held back: this controller's own check of the API's rules refuses it.
    HeldBack { slice: String, violations: String },
    /// The API server refused a slice (`422`).
    Refused {
        slice: String,
        pods: Vec<String>,
        error: String,
    },
}

impl Notice {
    /// The Warning Event that tells it on Service `service`.
    pub fn warning(&self, service: &str) -> (Reason, Action, String) {
        match self {
            Notice::PluginLoadFailed(warning) => {
                (Reason::PluginLoadFailed, Action::Load, warning.clone())
            }
            Notice::PluginFellBack(why) => (
                Reason::PluginFallback,
                Action::Evaluate,
                format!(
                    "{why}; decided by the built-in default plugin instead (failure policy: fallback)"
                ),
            ),
            Notice::InvalidService(problems) => (
                Reason::InvalidService,
                Action::Validate,
                format!(
                    "{service} (annotation {}): {}",
                    nad_model::input::target::NETWORK_ANNOTATION,
                    problems.join("; ")
                ),
            ),
            Notice::HeldBack { slice, violations } => (
                Reason::EndpointSliceRefused,
                Action::Apply,
                format!(
                    "EndpointSlice {slice} was not written: {violations}. This is a bug in \
                     nad-service-controller; please report it"
                ),
            ),
            Notice::Refused { slice, pods, error } => (
                Reason::EndpointSliceRefused,
                Action::Apply,
                format!(
                    "the API server refused EndpointSlice {slice} ({error}); pods concerned: {}. \
                     This is a bug in nad-service-controller; please report it. The slice is \
                     not sent again until its content changes",
                    if pods.is_empty() {
                        "none".to_owned()
                    } else {
                        pods.join(", ")
                    }
                ),
            ),
        }
    }
}

impl Outcome {
    /// A reconcile of a managed Service whose slices in the cache are `existing` (current with
    /// this controller's writes), named `plugin`, on `network`.
    pub fn managed(existing: &[Arc<EndpointSlice>], plugin: &str, network: &str) -> Self {
        let published = existing
            .iter()
            .map(|s| s.endpoints.as_ref().map_or(0, Vec::len))
            .sum();
        Outcome {
            plugin: plugin.to_owned(),
            network: network.to_owned(),
            counts: Counts {
                published: Some(published),
                ..Counts::default()
            },
            ..Outcome::default()
        }
    }

    /// A Service that is not this controller's: `invalid` (with its problems) or not.
    pub fn released(problems: Option<Vec<String>>) -> Self {
        let invalid = problems.is_some();
        Outcome {
            entry: Entry {
                released: true,
                ..Entry::default()
            },
            ended: Ended::Released { invalid },
            notices: problems.map(Notice::InvalidService).into_iter().collect(),
            problems: if invalid {
                BTreeSet::from([Problem::new(Reason::InvalidService)])
            } else {
                BTreeSet::new()
            },
            ..Outcome::default()
        }
    }

    /// What happened while the policy decided: the calls made, a load failure of the Service's
    /// plugin, a fallback to the built-in plugin.
    pub fn decided(&mut self, record: Record) {
        if let Some(warning) = record.load_warning {
            let problem = Problem::of_plugin(Reason::PluginLoadFailed, &record.plugin);
            self.problems.insert(problem);
            self.notices.push(Notice::PluginLoadFailed(warning));
        }
        if let Some(why) = record.fell_back {
            let problem = Problem::of_plugin(Reason::PluginFallback, &record.plugin);
            self.problems.insert(problem);
            let plugin = record
                .calls
                .first()
                .map_or(nad_plugin_runtime::BUILT_IN, |c| c.plugin.as_str());
            self.counts.fell_back = Some(plugin.to_owned());
            self.notices.push(Notice::PluginFellBack(why));
        }
        self.counts.calls = record.calls;
        self.plugin = record.plugin;
    }

    /// The step found nothing to plan.
    pub fn unchanged(mut self, remembered: Option<Remembered>, evaluated: usize) -> Self {
        tracing::debug!(pods = evaluated, "nothing to plan");
        self.entry.remembered = remembered;
        self.ended = Ended::Unchanged;
        self
    }

    /// The step planned: keeps its decisions and findings, and returns its changes to write.
    pub fn planned(&mut self, plan: Plan, max_endpoints: usize) -> Changes {
        let (desired, changes, changed_at) = self.decisions(plan);
        self.counts.planned = Some(Planned {
            added: changes.added,
            removed: changes.removed,
            figures: Figures {
                endpoints: count(desired.endpoint_count()),
                desired_slices: count(desired.ideal_slices(max_endpoints)),
                slices: count(changes.unchanged + changes.write.len()),
            },
            endpoints: desired.endpoint_count(),
            changed_at,
        });
        changes
    }

    /// The network names no NetworkAttachmentDefinition and has no endpoint: the slices stay
    /// as they are (better the slices of the network it had than none).
    pub fn network_missing(mut self, plan: Plan) -> Self {
        tracing::debug!(
            "no NetworkAttachmentDefinition for the network and no endpoint on it; slices kept"
        );
        self.decisions(plan);
        self
    }

    /// Keeps a plan's decisions, findings and problems; its endpoints, changes and the time of
    /// the change they apply.
    fn decisions(&mut self, plan: Plan) -> (Desired, Changes, Option<Timestamp>) {
        let observation = &plan.verdicts.observation;
        tracing::debug!(
            candidates = observation.candidates.len(),
            skipped = observation.skipped.len(),
            selected_by = %plan.verdicts.selection,
            "decided"
        );
        for (index, reason) in &plan.verdicts.excluded {
            let pod = observation.candidates[*index].name();
            tracing::debug!(%pod, reason, "excluded by the policy");
        }
        let problems = plan.problems().into_iter().map(Problem::new);
        self.problems.extend(problems);
        self.entry.node_retry = Some(plan.node_retry());
        let Plan {
            desired,
            changes,
            changed_at,
            findings,
            remembered,
            ..
        } = plan;
        self.entry.remembered = remembered;
        self.entry.findings = Some(findings);
        self.ended = Ended::Planned { outdated: false };
        (desired, changes, changed_at)
    }

    /// Slices held back before the write: the API would refuse them (by name, with the rules
    /// they break).
    pub fn held_back(&mut self, refused: Vec<(String, Vec<Violation>)>) {
        self.counts.held_back = refused.len();
        self.entry.held_back = !refused.is_empty();
        if !refused.is_empty() {
            self.problems
                .insert(Problem::new(Reason::EndpointSliceRefused));
        }
        for (slice, violations) in refused {
            let violations = violations
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            self.notices.push(Notice::HeldBack { slice, violations });
        }
    }

    /// The writes' answer, over the slices `existing` they were planned from. Writes that
    /// worked are kept even when others failed; a refused slice (`422`) is a bug here, told
    /// and not sent again until its content changes; any other failure fails the reconcile,
    /// to be retried.
    pub fn wrote(&mut self, written: Written, existing: &[Arc<EndpointSlice>]) {
        let Written {
            applied,
            deleted,
            failed,
            outdated,
            ..
        } = written;
        let created = applied
            .iter()
            .filter(|(name, _)| !existing.iter().any(|s| s.name_any() == *name))
            .count();
        if !outdated.is_empty() {
            tracing::debug!(slices = ?outdated, "EndpointSlices changed since they were planned; planning again from the change");
        }
        let mut refused = Vec::new();
        let mut first_error = None;
        for failure in failed {
            match (failure.slice, failure.error) {
                (Some(sent), Error::Apply { source, .. }) => {
                    let stored = existing.iter().find(|s| s.name_any() == sent.name_any());
                    self.notices.push(Notice::Refused {
                        slice: sent.name_any(),
                        pods: apply::refused_pods(&source, &sent, stored.map(|s| &**s)),
                        error: describe(&source),
                    });
                    refused.push(sent);
                }
                (_, error) => {
                    tracing::debug!(%error, "EndpointSlice write failed");
                    first_error.get_or_insert(error);
                }
            }
        }
        if !refused.is_empty() {
            self.problems
                .insert(Problem::new(Reason::EndpointSliceRefused));
        }
        self.counts.written = Some(Writes {
            applied: applied.len(),
            created,
            deleted: deleted.len(),
            refused: refused.len(),
        });
        self.entry.wrote = Some(Wrote {
            applied,
            deleted,
            refused,
            outdated: !outdated.is_empty(),
        });
        if let Some(error) = first_error {
            self.fail(error);
        } else if let Ended::Planned { .. } = self.ended {
            self.ended = Ended::Planned {
                outdated: !outdated.is_empty(),
            };
        }
    }

    /// The reconcile failed with `error`.
    pub fn failed(mut self, error: Error) -> Self {
        self.fail(error);
        self
    }

    fn fail(&mut self, error: Error) {
        self.entry.failed = Some(error.to_string());
        // A Service that failed is not released: what is known of it stays until it is retried.
        self.entry.released = false;
        self.ended = Ended::Failed(error);
    }
}

/// The problem a failure leaves the Service with: its Event reason, and for a plugin failure
/// the Service's `plugin`.
pub fn failure(error: &Error, plugin: &str) -> Problem {
    if error.is_plugin_failure() {
        Problem::of_plugin(error.event_reason(), plugin)
    } else {
        Problem::new(error.event_reason())
    }
}

pub fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written_one(changed_at: Option<Timestamp>) -> Counts {
        Counts {
            planned: Some(Planned {
                endpoints: 3,
                changed_at,
                ..Planned::default()
            }),
            written: Some(Writes {
                applied: 1,
                ..Writes::default()
            }),
            ..Counts::default()
        }
    }

    fn failed() -> Ended {
        Ended::Failed(Error::CachesNotReady)
    }

    #[test]
    fn a_failed_reconcile_logs_no_update_and_times_no_flip() {
        let at = Timestamp::UNIX_EPOCH;
        let counts = written_one(Some(at));
        let planned = Ended::Planned { outdated: false };
        assert_eq!(
            counts.writes_line(&planned),
            Some(WritesLine::Updated {
                endpoints: 3,
                applied: 1,
                deleted: 0,
                refused: 0
            })
        );
        assert_eq!(counts.flipped_at(&planned), Some(at));
        assert_eq!(counts.writes_line(&failed()), None, "its failure is logged");
        assert_eq!(counts.flipped_at(&failed()), None);
    }

    #[test]
    fn a_released_service_logs_its_slices_removed_and_a_plan_without_writes_is_up_to_date() {
        let removed = Counts {
            written: Some(Writes {
                deleted: 2,
                ..Writes::default()
            }),
            ..Counts::default()
        };
        let released = Ended::Released { invalid: true };
        assert_eq!(
            removed.writes_line(&released),
            Some(WritesLine::Removed {
                deleted: 2,
                invalid: true
            })
        );
        assert_eq!(
            removed.flipped_at(&released),
            None,
            "no plan, no change time"
        );
        let mut nothing = written_one(None);
        nothing.written = None;
        let planned = Ended::Planned { outdated: false };
        assert_eq!(
            nothing.writes_line(&planned),
            Some(WritesLine::UpToDate { endpoints: 3 })
        );
        assert_eq!(Counts::default().writes_line(&Ended::Unchanged), None);
    }
}
