//! `deploy/kubernetes/`: the kustomize base (StatefulSet of two relays on one slot,
//! headless Service, PodDisruptionBudget, ServiceMonitor, PrometheusRule, Grafana
//! dashboard) is valid for Kubernetes and agrees with the relay.
//!
//! - Schemas: the core resources are validated offline against the Kubernetes JSON
//!   schemas shipped by the PyPI package `kubernetes-validate` (strict: unknown fields
//!   are errors), for the oldest and the newest Kubernetes version the base supports.
//!   `.ci/run` installs it; without it the test fails and says how to install it.
//! - Wiring: selectors match the pods, probe ports and paths are the relay's, the
//!   configuration is a `run` the CLI accepts, secrets are files and not variables.
//! - PromQL: every alert and dashboard expression parses (`promql-parser`, the grammar
//!   of Prometheus), and every metric it names is one the relay serves.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use pgoutbox::metrics::Metrics;
use promql_parser::parser::{self, Expr};
use serde_yaml_ng::Value;

use super::{arg_by_env, cli_default, parse_as_cli, parse_duration, read, repo, subcommand};

const DIR: &str = "deploy/kubernetes";
/// The oldest Kubernetes the base is written for (PodDisruptionBudget's
/// `unhealthyPodEvictionPolicy`), and the newest the schema package knows.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.27.0", "1.37.0"];

fn yaml(file: &str) -> Value {
    serde_yaml_ng::from_str(&read(&format!("{DIR}/{file}")))
        .unwrap_or_else(|e| panic!("{DIR}/{file} is not valid YAML: {e}"))
}

fn kustomization() -> Value {
    yaml("kustomization.yaml")
}

/// The files listed under `resources:`.
fn resources() -> Vec<String> {
    kustomization()["resources"]
        .as_sequence()
        .expect("kustomization.yaml lists resources")
        .iter()
        .map(|v| v.as_str().expect("a resource is a file name").to_owned())
        .collect()
}

/// The resource of `kind` in the base.
fn resource(kind: &str) -> Value {
    resources()
        .iter()
        .map(|f| yaml(f))
        .find(|doc| doc["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("no {kind} in {DIR}"))
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => panic!("expected a scalar, got {other:?}"),
    }
}

fn labels(v: &Value) -> BTreeMap<String, String> {
    v.as_mapping()
        .map(|m| m.iter().map(|(k, v)| (text(k), text(v))).collect())
        .unwrap_or_default()
}

/// Whether every pair of `selector` is in `labels`.
fn selects(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    let selector = self::labels(selector);
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[test]
fn the_base_lists_every_manifest_and_each_parses() {
    let listed: BTreeSet<String> = resources().into_iter().collect();
    let generated: BTreeSet<String> = kustomization()["configMapGenerator"]
        .as_sequence()
        .into_iter()
        .flatten()
        .flat_map(|g| g["files"].as_sequence().cloned().unwrap_or_default())
        .map(|f| text(&f))
        .collect();
    for entry in std::fs::read_dir(repo().join(DIR)).expect("deploy/kubernetes exists") {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name == "kustomization.yaml" {
            continue;
        }
        assert!(
            listed.contains(&name) || generated.contains(&name),
            "{DIR}/{name} is in neither resources nor configMapGenerator of kustomization.yaml"
        );
    }
    for file in &listed {
        let doc = yaml(file);
        for key in ["apiVersion", "kind"] {
            assert!(doc[key].as_str().is_some(), "{file}: no {key}");
        }
        assert!(
            doc["metadata"]["name"].as_str().is_some(),
            "{file}: no name"
        );
    }
    for file in &generated {
        let json: serde_json::Value = serde_json::from_str(&read(&format!("{DIR}/{file}")))
            .unwrap_or_else(|e| panic!("{DIR}/{file} is not JSON: {e}"));
        assert!(json.is_object(), "{file}");
    }
}

#[test]
fn core_resources_validate_against_the_kubernetes_schemas() {
    // The operator's CRDs (ServiceMonitor, PrometheusRule) have no schema there; the
    // tests below check what they must say.
    let files: Vec<PathBuf> = resources()
        .iter()
        .filter(|f| {
            yaml(f)["apiVersion"]
                .as_str()
                .is_some_and(|v| !v.starts_with("monitoring.coreos.com/"))
        })
        .map(|f| repo().join(DIR).join(f))
        .collect();
    assert!(files.len() >= 5, "{files:?}");
    for version in KUBERNETES_VERSIONS {
        let out = Command::new("kubernetes-validate")
            .args(["--strict", "--no-warn", "-k", version])
            .args(&files)
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run kubernetes-validate ({e}); install the validator and its \
                     offline schemas with: pip install kubernetes-validate"
                )
            });
        let report = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "Kubernetes {version} schemas:\n{report}"
        );
        let passed = report.matches(" passed for resource ").count();
        assert_eq!(passed, files.len(), "every file validated:\n{report}");
    }
}

#[test]
fn the_statefulset_runs_an_active_standby_pair_with_probes_that_fit_the_standby() {
    let sts = resource("StatefulSet");
    let spec = &sts["spec"];
    assert_eq!(
        spec["replicas"].as_u64(),
        Some(2),
        "one active, one standby"
    );
    assert_eq!(spec["podManagementPolicy"].as_str(), Some("Parallel"));
    let pod = &spec["template"];
    let pod_labels = labels(&pod["metadata"]["labels"]);
    assert!(selects(&spec["selector"]["matchLabels"], &pod_labels));
    let containers = pod["spec"]["containers"].as_sequence().expect("containers");
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(
        c["args"]
            .as_sequence()
            .map(|a| a.iter().map(text).collect::<Vec<_>>()),
        Some(vec!["run".to_owned()])
    );

    // Probes on the relay's port: liveness never depends on the role.
    let port = default_port();
    let metrics_port = c["ports"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|p| p["name"].as_str() == Some("metrics"))
        .expect("a container port named metrics");
    assert_eq!(
        metrics_port["containerPort"].as_u64(),
        Some(u64::from(port))
    );
    let probe = |name: &str| {
        let get = &c[name]["httpGet"];
        (text(&get["path"]), text(&get["port"]))
    };
    assert_eq!(probe("livenessProbe"), ("/livez".into(), "metrics".into()));
    assert_eq!(
        probe("readinessProbe"),
        ("/readyz".into(), "metrics".into())
    );

    // Stopping outlasts the SIGTERM drain.
    let grace = pod["spec"]["terminationGracePeriodSeconds"]
        .as_u64()
        .unwrap();
    let drain = parse_duration(&cli_default("run", "PGOUTBOX_DRAIN_TIMEOUT"));
    assert!(grace > drain.as_secs(), "grace {grace}s vs drain {drain:?}");

    // The image's user (Dockerfile) and a read-only root.
    assert_eq!(
        pod["spec"]["securityContext"]["runAsUser"].as_u64(),
        Some(10001)
    );
    assert_eq!(
        c["securityContext"]["readOnlyRootFilesystem"].as_bool(),
        Some(true)
    );
}

/// The port of the relay's default `--http-addr`.
fn default_port() -> u16 {
    let addr: std::net::SocketAddr = cli_default("run", "PGOUTBOX_HTTP_ADDR").parse().unwrap();
    addr.port()
}

#[test]
fn the_configuration_is_a_run_the_cli_accepts_with_secrets_as_files() {
    let sts = resource("StatefulSet");
    let pod = &sts["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let config_name = text(&c["envFrom"][0]["configMapRef"]["name"]);
    let config = resource("ConfigMap");
    assert_eq!(text(&config["metadata"]["name"]), config_name);
    let env = labels(&config["data"]);
    assert!(
        c["env"]
            .as_sequence()
            .into_iter()
            .flatten()
            .all(|e| e["valueFrom"]["secretKeyRef"].is_null()),
        "no secret in an environment variable"
    );

    // Files named by *_FILE variables lie in the secret's mount.
    let secret_volume = pod["volumes"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|v| !v["secret"].is_null())
        .expect("a secret volume");
    let mount = c["volumeMounts"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|m| m["name"] == secret_volume["name"])
        .expect("the secret volume is mounted");
    assert_eq!(mount["readOnly"].as_bool(), Some(true));
    let mount_path = text(&mount["mountPath"]);
    let run = subcommand("run");
    let files: Vec<(&String, &String)> = env.iter().filter(|(k, _)| k.ends_with("_FILE")).collect();
    assert!(!files.is_empty(), "the password comes from a file");
    for (name, path) in &files {
        assert!(
            arg_by_env(&run, name).is_some(),
            "`run` does not read {name}"
        );
        assert!(
            path.starts_with(&format!("{mount_path}/")),
            "{name}={path} outside {mount_path}"
        );
    }
    // The rest is a configuration `run` accepts (the files do not exist here).
    let rest: BTreeMap<String, String> = env
        .iter()
        .filter(|(k, _)| !k.ends_with("_FILE"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    parse_as_cli(
        &["run".to_owned()],
        &rest,
        "deploy/kubernetes/configmap.yaml",
    );

    // Reachable by the kubelet and the Service: every interface, on the probed port.
    let addr: std::net::SocketAddr = env["PGOUTBOX_HTTP_ADDR"].parse().unwrap();
    assert!(addr.ip().is_unspecified(), "{addr}");
    assert_eq!(addr.port(), default_port());
    // The state file on the pod's persistent volume.
    let state = c["volumeMounts"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|m| text(&m["mountPath"]) == env["PGOUTBOX_STATE_DIR"])
        .expect("PGOUTBOX_STATE_DIR is a mounted volume");
    let claims = sts["spec"]["volumeClaimTemplates"]
        .as_sequence()
        .expect("claims");
    assert!(claims
        .iter()
        .any(|t| t["metadata"]["name"] == state["name"]));
}

#[test]
fn service_budget_and_monitor_select_the_relays() {
    let sts = resource("StatefulSet");
    let pod_labels = labels(&sts["spec"]["template"]["metadata"]["labels"]);
    let service = resource("Service");
    assert_eq!(
        text(&sts["spec"]["serviceName"]),
        text(&service["metadata"]["name"])
    );
    assert!(selects(&service["spec"]["selector"], &pod_labels));
    assert_eq!(
        service["spec"]["publishNotReadyAddresses"].as_bool(),
        Some(true),
        "a relay that is not ready is still scraped"
    );
    let port = &service["spec"]["ports"][0];
    assert_eq!(text(&port["targetPort"]), "metrics");

    let pdb = resource("PodDisruptionBudget");
    assert!(selects(
        &pdb["spec"]["selector"]["matchLabels"],
        &pod_labels
    ));
    let min = pdb["spec"]["minAvailable"].as_u64().expect("minAvailable");
    assert!(min >= 1 && min < sts["spec"]["replicas"].as_u64().unwrap());

    let monitor = resource("ServiceMonitor");
    assert!(selects(
        &monitor["spec"]["selector"]["matchLabels"],
        &labels(&service["metadata"]["labels"])
    ));
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(text(&endpoint["port"]), text(&port["name"]));
    assert_eq!(text(&endpoint["path"]), "/metrics");
}

/// Metric families the relay serves, with the histogram series names.
fn served_metrics() -> BTreeSet<String> {
    // Poll mode's backlog gauges appear once the relay has measured a backlog.
    let metrics = Metrics::default();
    metrics.poll.set_backlog(0, None);
    let text = metrics.render();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split(' ');
            let (name, kind) = (words.next().unwrap(), words.next().unwrap_or(""));
            names.insert(name.to_owned());
            if kind == "histogram" {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
        }
    }
    names
}

/// The metric names `expr` selects, after parsing it as Prometheus does.
fn selected_metrics(expr: &str, origin: &str) -> BTreeSet<String> {
    fn walk(e: &Expr, out: &mut BTreeSet<String>) {
        match e {
            Expr::VectorSelector(vs) => out.extend(vs.name.clone()),
            Expr::MatrixSelector(ms) => out.extend(ms.vs.name.clone()),
            Expr::Aggregate(a) => {
                walk(&a.expr, out);
                if let Some(p) = &a.param {
                    walk(p, out);
                }
            }
            Expr::Unary(u) => walk(&u.expr, out),
            Expr::Binary(b) => {
                walk(&b.lhs, out);
                walk(&b.rhs, out);
            }
            Expr::Paren(p) => walk(&p.expr, out),
            Expr::Subquery(s) => walk(&s.expr, out),
            Expr::Call(c) => c.args.args.iter().for_each(|a| walk(a, out)),
            _ => {}
        }
    }
    let parsed =
        parser::parse(expr).unwrap_or_else(|e| panic!("{origin}: {expr:?} does not parse: {e}"));
    let mut out = BTreeSet::new();
    walk(&parsed, &mut out);
    assert!(!out.is_empty(), "{origin}: {expr:?} selects no metric");
    out
}

fn assert_served(names: &BTreeSet<String>, served: &BTreeSet<String>, origin: &str) {
    for name in names {
        assert!(
            served.contains(name),
            "{origin}: {name} is not a metric the relay serves ({served:?})"
        );
    }
}

#[test]
fn alert_rules_parse_and_name_only_served_metrics() {
    let served = served_metrics();
    assert!(served.contains("pgoutbox_role") && served.contains("process_start_time_seconds"));
    let rules = resource("PrometheusRule");
    let mut alerts = BTreeSet::new();
    for group in rules["spec"]["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let name = text(&rule["alert"]);
            let expr = text(&rule["expr"]);
            assert_served(&selected_metrics(&expr, &name), &served, &name);
            if !rule["for"].is_null() {
                parse_duration(&text(&rule["for"]));
            }
            assert!(!rule["labels"]["severity"].is_null(), "{name}: no severity");
            assert!(
                !rule["annotations"]["summary"].is_null(),
                "{name}: no summary"
            );
            alerts.insert(name);
        }
    }
    for wanted in [
        "PgoutboxRelayDown",
        "PgoutboxNoStandby",
        "PgoutboxNoProgress",
        "PgoutboxSlotLagHigh",
        "PgoutboxSlotBacklogGrowing",
        "PgoutboxPollBacklogOld",
        "PgoutboxPollBacklogGrowing",
    ] {
        assert!(alerts.contains(wanted), "{wanted} missing: {alerts:?}");
    }
}

#[test]
fn dashboard_queries_parse_and_name_only_served_metrics() {
    let served = served_metrics();
    let dashboard: serde_json::Value =
        serde_json::from_str(&read(&format!("{DIR}/grafana-dashboard.json"))).unwrap();
    // Grafana's variables, replaced by what they stand for at query time.
    let expand = |q: &str| q.replace("$__rate_interval", "1m").replace("$job", ".*");
    let mut queries = 0;
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().unwrap_or("?");
        for target in panel["targets"].as_array().expect("targets") {
            let expr = expand(target["expr"].as_str().expect("expr"));
            assert_served(&selected_metrics(&expr, title), &served, title);
            queries += 1;
        }
    }
    assert!(queries >= 10, "{queries} queries");
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"]
            .as_str()
            .and_then(|q| q.strip_prefix("label_values("))
        {
            let metric = query.split([',', ')']).next().unwrap().trim();
            assert!(served.contains(metric), "variable query on {metric}");
        }
    }
}
