//! Probes in cluster mode: the runner's findings reach the node agent as messages (events to
//! post, pods whose status to post again), and its results decide `ready`/`started` in the
//! PodStatus the agent posts.

use super::Msg;
use crate::generate::output::PodKey;
use crate::probe::spec::pod_probes;
use crate::status::model::Observed;
use crate::status::probes::{Results, overlay_observed};
use k8s_openapi::api::core::v1::Pod;
use std::sync::RwLock;
use std::sync::mpsc::Sender;

/// What the probe runner tells the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    Event {
        pod: PodKey,
        container: String,
        type_: &'static str,
        reason: String,
        message: String,
    },
    Changed(PodKey),
}

/// The runner's sink in cluster mode: the agent's own channel.
pub struct AgentSink(pub Sender<Msg>);

impl crate::prober::runner::Sink for AgentSink {
    fn event(
        &self,
        pod: &PodKey,
        container: &str,
        type_: &'static str,
        reason: &str,
        message: &str,
    ) {
        let _ = self.0.send(Msg::Probe(Note::Event {
            pod: pod.clone(),
            container: container.to_string(),
            type_,
            reason: reason.to_string(),
            message: message.to_string(),
        }));
    }

    fn changed(&self, pod: &PodKey) {
        let _ = self.0.send(Msg::Probe(Note::Changed(pod.clone())));
    }
}

/// Applies the runner's results to an API pod's status model (its spec says which containers
/// have probes).
pub fn overlay_api_pod(pod: &Pod, obs: &mut Observed, results: &RwLock<Results>) {
    let probes = pod.spec.as_ref().map(pod_probes).unwrap_or_default();
    if !probes.is_empty() {
        let results = results.read().unwrap_or_else(|e| e.into_inner());
        overlay_observed(obs, &probes, &results);
    }
}
