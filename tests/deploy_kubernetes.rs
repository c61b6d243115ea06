//! The Kubernetes kit in deploy/kubernetes, read into the typed objects of
//! `k8s-openapi`: the shards are an Indexed Job of N pods whose Cadence knows N, the
//! API key comes from a Secret, and every container's args (with `$(VAR)` expanded
//! from its env, as the kubelet does) parse with Cadence's own command line.

use cadence::cli::{Cli, Command};
use clap::Parser;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, PersistentVolumeClaim};
use std::collections::BTreeMap;
use std::path::Path;

fn manifest<T: serde::de::DeserializeOwned>(name: &str) -> T {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/kubernetes")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    // The one substitution the README's apply command makes.
    let text = text.replace("START_AT", "2026-11-23T14:00:00Z");
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The container's args with `$(NAME)` replaced from its literal env, and from
/// `extra` (what Kubernetes adds, e.g. JOB_COMPLETION_INDEX).
fn expanded_args(c: &Container, extra: &[(&str, &str)]) -> Vec<String> {
    let mut env: BTreeMap<String, String> = c
        .env
        .iter()
        .flatten()
        .filter_map(|e| e.value.clone().map(|v| (e.name.clone(), v)))
        .collect();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    c.args
        .iter()
        .flatten()
        .map(|a| {
            let mut a = a.clone();
            for (k, v) in &env {
                a = a.replace(&format!("$({k})"), v);
            }
            assert!(!a.contains("$("), "{a}: a variable the pod does not define");
            a
        })
        .collect()
}

fn env_value(c: &Container, name: &str) -> Option<String> {
    c.env
        .iter()
        .flatten()
        .find(|e| e.name == name)?
        .value
        .clone()
}

#[test]
fn the_shards_are_an_indexed_job_of_n_pods_that_know_n() {
    let job: Job = manifest("shards-job.yaml");
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
    let n = spec.parallelism.unwrap();
    assert_eq!(spec.completions, Some(n), "one pod per shard, all at once");
    assert_eq!(
        spec.backoff_limit,
        Some(0),
        "a restarted shard would start late"
    );
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let c = &pod.containers[0];
    assert_eq!(env_value(c, "CADENCE_SHARDS"), Some(n.to_string()));

    // The API key comes from a Secret, never a literal.
    let key = c
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "OPENAI_API_KEY")
        .unwrap();
    assert!(key.value.is_none());
    let secret = key
        .value_from
        .as_ref()
        .and_then(|v| v.secret_key_ref.as_ref())
        .expect("the API key is a secretKeyRef");
    assert_eq!(
        (secret.name.as_str(), secret.key.as_str()),
        ("cadence-api-key", "api-key")
    );

    // Every pod's args parse, and each pod is its own shard of n.
    for index in 0..n {
        let i = index.to_string();
        let args = expanded_args(c, &[("JOB_COMPLETION_INDEX", &i)]);
        let argv = std::iter::once("cadence".to_string()).chain(args);
        let Command::Bench(b) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("the shards run cadence bench")
        };
        assert!(
            b.start_at.is_some(),
            "every shard starts at the shared time"
        );
        assert!(b.duration.is_some(), "and stops on the shared deadline");
        let records = b.records.unwrap();
        assert!(records.starts_with("/results"), "{}", records.display());
        assert!(records
            .to_string_lossy()
            .contains(&format!("shard-{index}.")));
        let shards: u32 = env_value(c, "CADENCE_SHARDS").unwrap().parse().unwrap();
        assert_eq!(
            cadence_bench::shard::resolve_shard(b.shard.as_deref(), Some(shards), Some(&i)),
            Ok(Some((index as u32, n as u32)))
        );
    }
    let mount = &c.volume_mounts.as_ref().unwrap()[0];
    assert_eq!(mount.mount_path, "/results");
    let claim = &pod.volumes.as_ref().unwrap()[0]
        .persistent_volume_claim
        .as_ref()
        .unwrap()
        .claim_name;
    let pvc: PersistentVolumeClaim = manifest("results-pvc.yaml");
    assert_eq!(pvc.metadata.name.as_deref(), Some(claim.as_str()));
    assert_eq!(
        pvc.spec.unwrap().access_modes.unwrap(),
        ["ReadWriteMany"],
        "every shard's pod writes to it at once"
    );
}

#[test]
fn the_merge_job_reads_the_shards_folder_with_cadence_report() {
    let shards: Job = manifest("shards-job.yaml");
    let merge: Job = manifest("merge-job.yaml");
    let pod = |j: &Job| j.spec.clone().unwrap().template.spec.unwrap();
    let (s, m) = (pod(&shards), pod(&merge));
    let c = &m.containers[0];
    let argv = std::iter::once("cadence".to_string()).chain(expanded_args(c, &[]));
    let Command::Report(r) = Cli::try_parse_from(argv).unwrap().command else {
        panic!("the merge runs cadence report")
    };
    let mount = |p: &k8s_openapi::api::core::v1::PodSpec| {
        p.containers[0].volume_mounts.clone().unwrap()[0].clone()
    };
    let (sm, mm) = (mount(&s), mount(&m));
    assert_eq!(r.files, [Path::new(&mm.mount_path)]);
    assert_eq!(
        (
            sm.sub_path_expr,
            s.volumes.clone().unwrap()[0]
                .persistent_volume_claim
                .clone()
        ),
        (
            mm.sub_path_expr,
            m.volumes.clone().unwrap()[0]
                .persistent_volume_claim
                .clone()
        ),
        "the merge reads the very folder of the same volume the shards wrote"
    );
    assert_eq!(
        env_value(&s.containers[0], "CADENCE_START_AT"),
        env_value(c, "CADENCE_START_AT")
    );
}
