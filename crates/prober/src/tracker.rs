//! Thresholds as kubelet applies them: a pod's readiness on a network flips only after
//! `failureThreshold` failures (or `successThreshold` answers) in a row. Pure.

use nad_model::probe::Timing;

/// One pod's readiness on one network, as the prober believes it.
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    /// What the pod's condition says now (`None`: no condition yet).
    status: Option<bool>,
    successes: u32,
    failures: u32,
}

impl Tracker {
    /// Starts from the condition the pod carries (after a restart of the prober: the status
    /// it wrote before), so that a restart does not flap.
    pub fn new(known: Option<bool>) -> Self {
        Tracker {
            status: known,
            successes: 0,
            failures: 0,
        }
    }

    pub fn status(&self) -> Option<bool> {
        self.status
    }

    /// Counts one attempt; the new status when it changes (the condition to write).
    pub fn record(&mut self, answered: bool, timing: &Timing) -> Option<bool> {
        if answered {
            self.successes = self.successes.saturating_add(1);
            self.failures = 0;
            if self.status != Some(true) && self.successes >= timing.success_threshold {
                self.status = Some(true);
                return self.status;
            }
        } else {
            self.failures = self.failures.saturating_add(1);
            self.successes = 0;
            if self.status != Some(false) && self.failures >= timing.failure_threshold {
                self.status = Some(false);
                return self.status;
            }
        }
        None
    }

    /// The flip to `status` could not be written: go back to `previous`, keeping the counts,
    /// so that the next attempt with the same result flips (and writes) again.
    pub fn unwrite(&mut self, previous: Option<bool>) {
        self.status = previous;
    }

    /// Failures in a row so far (for the message of a flip to False).
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(success: u32, failure: u32) -> Timing {
        Timing {
            success_threshold: success,
            failure_threshold: failure,
            ..Timing::default()
        }
    }

    #[test]
    fn a_healthy_pod_is_written_once_and_never_again() {
        let spec = spec(1, 3);
        let mut t = Tracker::new(None);
        assert_eq!(t.record(true, &spec), Some(true));
        for _ in 0..1000 {
            assert_eq!(t.record(true, &spec), None);
        }
    }

    #[test]
    fn it_takes_the_thresholds_in_a_row_to_flip() {
        let spec = spec(2, 3);
        let mut t = Tracker::new(Some(true));
        assert_eq!(t.record(false, &spec), None);
        assert_eq!(t.record(false, &spec), None);
        assert_eq!(t.record(true, &spec), None, "an answer resets the failures");
        assert_eq!(t.record(false, &spec), None);
        assert_eq!(t.record(false, &spec), None);
        assert_eq!(t.failures(), 2);
        assert_eq!(t.record(false, &spec), Some(false));
        assert_eq!(t.record(false, &spec), None, "written once");
        assert_eq!(t.record(true, &spec), None);
        assert_eq!(t.record(true, &spec), Some(true));
        assert_eq!(t.status(), Some(true));
    }

    #[test]
    fn a_flip_that_could_not_be_written_is_retried_at_the_next_attempt() {
        let spec = spec(1, 3);
        let mut t = Tracker::new(Some(true));
        for _ in 0..2 {
            assert_eq!(t.record(false, &spec), None);
        }
        assert_eq!(t.record(false, &spec), Some(false));
        t.unwrite(Some(true));
        assert_eq!(t.record(false, &spec), Some(false), "at once, not 3 more");
    }

    #[test]
    fn a_restart_starts_from_the_condition_written_before() {
        let spec = spec(1, 3);
        let mut t = Tracker::new(Some(false));
        assert_eq!(t.record(false, &spec), None, "still down: nothing to write");
        let mut t = Tracker::new(Some(true));
        assert_eq!(t.record(true, &spec), None, "still up: nothing to write");
        assert_eq!(t.record(false, &spec), None, "one failure is not a flip");
    }
}
