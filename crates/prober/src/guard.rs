//! Fail closed: a prober writes a pod's condition only while the admission policy that confines
//! its writes (the pods of its own node; there, the conditions of the networks it probes and
//! nothing else) and that policy's binding are in force. RBAC alone would let it patch the status
//! of every pod in the cluster, so a policy deleted, renamed or turned to a warning must stop it
//! rather than set it free. It reads both objects by name at start and every period; until the
//! first read says they are in force, it writes nothing. A change either way is told once: a log
//! line, an Event on the prober's own pod and `nad_prober_admission_policy_in_force`.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use k8s_openapi::api::{
    admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding},
    core::v1::ObjectReference,
};
use kube::{
    Api, Client,
    runtime::events::{EventType, Recorder},
};

use super::metrics::ProbeMetrics;
use nad_model::reason::{Action, Reason};

/// The policy and binding to find, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    pub policy: String,
    pub binding: String,
}

/// Whether `policy` and `binding` (as read, `None` when missing) confine the prober's writes;
/// otherwise what is wrong and what to do, in one sentence.
pub fn judge(
    names: &Names,
    policy: Option<&ValidatingAdmissionPolicy>,
    binding: Option<&ValidatingAdmissionPolicyBinding>,
) -> Result<(), String> {
    let apply = "apply deploy/prober/admission-policy.yaml (or the Helm chart's prober), or give \
                 --admission-policy and --admission-policy-binding the names it was applied with";
    let Some(policy) = policy else {
        return Err(format!(
            "the ValidatingAdmissionPolicy {} does not exist: {apply}",
            names.policy
        ));
    };
    let spec = policy.spec.as_ref();
    if spec.and_then(|s| s.failure_policy.as_deref()) == Some("Ignore") {
        return Err(format!(
            "the ValidatingAdmissionPolicy {} has failurePolicy Ignore, so a failing check lets a \
             write through: set it to Fail",
            names.policy
        ));
    }
    let param_kind = spec
        .and_then(|s| s.param_kind.as_ref())
        .and_then(|k| k.kind.as_deref());
    if param_kind != Some("ClusterRoleBinding") {
        return Err(format!(
            "the ValidatingAdmissionPolicy {} is not the prober's (its paramKind is {}, not \
             ClusterRoleBinding): {apply}",
            names.policy,
            param_kind.unwrap_or("none")
        ));
    }
    let Some(binding) = binding else {
        return Err(format!(
            "the ValidatingAdmissionPolicyBinding {} does not exist, so the policy {} is not \
             enforced: {apply}",
            names.binding, names.policy
        ));
    };
    let spec = &binding.spec;
    if spec.policy_name != names.policy {
        return Err(format!(
            "the ValidatingAdmissionPolicyBinding {} binds the policy {:?}, not {}: {apply}",
            names.binding, spec.policy_name, names.policy
        ));
    }
    if !spec.validation_actions.iter().any(|a| a == "Deny") {
        return Err(format!(
            "the ValidatingAdmissionPolicyBinding {} has validationActions [{}], which refuse \
             nothing: give it Deny",
            names.binding,
            spec.validation_actions.join(", ")
        ));
    }
    if spec
        .param_ref
        .as_ref()
        .and_then(|p| p.selector.as_ref())
        .is_none()
    {
        return Err(format!(
            "the ValidatingAdmissionPolicyBinding {} selects no prober grant (paramRef.selector \
             is unset), so the policy knows no prober: {apply}",
            names.binding
        ));
    }
    Ok(())
}

/// Reads the policy and its binding: `Err` when they cannot be read (the message says why).
async fn read(client: &Client, names: &Names) -> Result<(), String> {
    let cannot = |what: &str, name: &str, e: &kube::Error| {
        format!(
            "cannot read the {what} {name} ({}): the prober's ClusterRole grants get on it by \
             name; give it this name",
            nad_process::kube_error::describe(e)
        )
    };
    let policy = Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .get_opt(&names.policy)
        .await
        .map_err(|e| cannot("ValidatingAdmissionPolicy", &names.policy, &e))?;
    let binding = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .get_opt(&names.binding)
        .await
        .map_err(|e| cannot("ValidatingAdmissionPolicyBinding", &names.binding, &e))?;
    judge(names, policy.as_ref(), binding.as_ref())
}

/// Keeps `in_force` true exactly while the policy and its binding are, checking every
/// `period`; tells each change on `own_pod` (the prober's pod, when it knows it).
pub async fn watch(
    client: Client,
    names: Names,
    period: Duration,
    in_force: Arc<AtomicBool>,
    metrics: Arc<ProbeMetrics>,
    recorder: Recorder,
    own_pod: Option<ObjectReference>,
) {
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // `None` until the first read: the first result is always told.
    let mut told: Option<Result<(), String>> = None;
    loop {
        interval.tick().await;
        let now = read(&client, &names).await;
        in_force.store(now.is_ok(), Ordering::Relaxed);
        metrics.set_guarded(now.is_ok());
        if told.as_ref() == Some(&now) {
            continue;
        }
        let (type_, reason, note) = match &now {
            Ok(()) => {
                tracing::info!(policy = %names.policy, binding = %names.binding, "the admission policy that confines this prober's writes is in force: writing conditions");
                (
                    EventType::Normal,
                    Reason::AdmissionPolicyInForce,
                    format!(
                        "The admission policy {} and its binding {} are in force: writing \
                         network readiness conditions",
                        names.policy, names.binding
                    ),
                )
            }
            Err(why) => {
                tracing::error!(policy = %names.policy, binding = %names.binding, problem = %why, "the admission policy that confines this prober's writes is not in force: writing no condition until it is");
                (
                    EventType::Warning,
                    Reason::AdmissionPolicyMissing,
                    format!("Writing no network readiness condition: {why}"),
                )
            }
        };
        told = Some(now);
        let Some(pod) = &own_pod else { continue };
        let event = super::run::event(type_, reason, &note, Action::CheckAdmissionPolicy);
        if let Err(e) = recorder.publish(&event, pod).await {
            tracing::warn!(%reason, error = %nad_process::kube_error::describe(&e), "could not publish an Event on the prober's own pod");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names() -> Names {
        Names {
            policy: "p".into(),
            binding: "b".into(),
        }
    }

    fn policy(spec: serde_json::Value) -> ValidatingAdmissionPolicy {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    fn binding(spec: serde_json::Value) -> ValidatingAdmissionPolicyBinding {
        serde_json::from_value(json!({"metadata": {"name": "b"}, "spec": spec})).unwrap()
    }

    fn shipped() -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
        (
            policy(json!({"failurePolicy": "Fail",
                "paramKind": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding"}})),
            binding(json!({"policyName": "p", "validationActions": ["Deny"],
                "paramRef": {"selector": {}, "parameterNotFoundAction": "Deny"}})),
        )
    }

    #[test]
    fn the_shipped_policy_and_binding_are_in_force() {
        let (p, b) = shipped();
        assert_eq!(judge(&names(), Some(&p), Some(&b)), Ok(()));
    }

    #[test]
    fn anything_less_than_the_policy_enforced_is_not_in_force_and_says_what_to_change() {
        let (p, b) = shipped();
        let refused = |p: Option<&ValidatingAdmissionPolicy>,
                       b: Option<&ValidatingAdmissionPolicyBinding>| {
            judge(&names(), p, b).unwrap_err()
        };
        assert!(
            refused(None, Some(&b))
                .starts_with("the ValidatingAdmissionPolicy p does not exist: apply")
        );
        assert!(refused(Some(&p), None).starts_with(
            "the ValidatingAdmissionPolicyBinding b does not exist, so the policy p is not enforced"
        ));
        let mut ignore = p.clone();
        ignore.spec.as_mut().unwrap().failure_policy = Some("Ignore".into());
        assert!(refused(Some(&ignore), Some(&b)).contains("failurePolicy Ignore"));
        let mut other = p.clone();
        other.spec.as_mut().unwrap().param_kind = None;
        assert!(refused(Some(&other), Some(&b)).contains("its paramKind is none"));
        let mut warn = b.clone();
        warn.spec.validation_actions = vec!["Warn".into(), "Audit".into()];
        assert!(
            refused(Some(&p), Some(&warn))
                .contains("validationActions [Warn, Audit], which refuse nothing")
        );
        let mut elsewhere = b.clone();
        elsewhere.spec.policy_name = "q".into();
        assert!(refused(Some(&p), Some(&elsewhere)).contains("binds the policy \"q\", not p"));
        let mut unparamed = b.clone();
        unparamed.spec.param_ref = None;
        assert!(refused(Some(&p), Some(&unparamed)).contains("selects no prober grant"));
    }
}
