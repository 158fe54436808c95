//! The OpenAPI document: it describes every route the server serves (and nothing it does not),
//! it is valid OpenAPI 3.1 by an independent validator, and a property-based API tester built
//! from it (schemathesis) finds no 5xx and no answer outside its schema on a live server.

use crate::common::{external_tool, TestApp};
use serde_json::Value;

const METHODS: [&str; 5] = ["GET", "POST", "PATCH", "DELETE", "PUT"];

async fn document(app: &TestApp) -> Value {
    let (status, document) = app.call("GET", "/openapi.json", None).await;
    assert_eq!(status, 200);
    document
}

/// Each documented operation, with its path parameters filled in.
fn operations(document: &Value) -> Vec<(String, String, String)> {
    let mut found = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        let concrete = path
            .split('/')
            .map(|part| if part.starts_with('{') { "x" } else { part })
            .collect::<Vec<_>>()
            .join("/");
        for method in item.as_object().unwrap().keys() {
            found.push((method.to_uppercase(), path.clone(), concrete.clone()));
        }
    }
    found
}

async fn request(app: &TestApp, method: &str, path: &str) -> (u16, String) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let answer = app
        .http
        .request(method, format!("{}{path}", app.base()))
        .send()
        .await
        .unwrap();
    (answer.status().as_u16(), answer.text().await.unwrap())
}

#[tokio::test]
async fn every_route_the_router_serves_is_in_the_document() {
    let app = TestApp::start("").await;
    let document = document(&app).await;
    assert_eq!(document["openapi"], "3.1.0");
    let operations = operations(&document);
    assert!(operations.len() >= 35, "{operations:?}");
    // Each documented operation is served: never the fallback's "no such route", never 405.
    for (method, path, concrete) in &operations {
        let (status, body) = request(&app, method, concrete).await;
        assert_ne!(status, 405, "{method} {path}: {body}");
        assert!(!body.contains("no such route"), "{method} {path}: {body}");
        // And it describes the answer it gave (the shared errors included).
        let documented = &document["paths"][path][method.to_lowercase()]["responses"];
        assert!(
            documented.get(status.to_string()).is_some(),
            "{method} {path} answered {status}, which its description lacks: {body}"
        );
    }
    // No method is served on a documented path without being described.
    for path in document["paths"].as_object().unwrap().keys() {
        let (_, _, concrete) = operations.iter().find(|(_, p, _)| p == path).unwrap();
        let served: Vec<String> = document["paths"][path]
            .as_object()
            .unwrap()
            .keys()
            .map(|m| m.to_uppercase())
            .collect();
        for method in METHODS {
            if !served.iter().any(|m| m == method) {
                let (status, body) = request(&app, method, concrete).await;
                assert_eq!(status, 405, "{method} {path} is served: {body}");
                // The answer names what is served there.
                assert!(body.contains(&served[0]), "{method} {path}: {body}");
            }
        }
    }
    // And no route is added but through `routes!`, which describes it: the router's source
    // adds none any other way.
    let source = include_str!("../../src/api/mod.rs");
    // (Its unit tests, at the end, build routers of their own.)
    let source = source.split("mod panic_tests").next().unwrap();
    assert!(source.contains("pub fn router("));
    for bypass in [
        ".route(",
        ".route_service(",
        ".nest(",
        ".nest_service(",
        ".merge(",
    ] {
        assert!(
            !source.contains(bypass),
            "src/api/mod.rs adds a route with {bypass}, which the document would not describe"
        );
    }
    app.stop().await;
}

/// What the document says of authentication is what the server does: an operation marked open
/// answers without a token, every other one answers 401.
#[tokio::test]
async fn the_document_says_which_routes_need_a_token() {
    let hex = hookline::tokens::sha256_hex("hl_openapi_test");
    let app = TestApp::start(&format!(
        "[[api_tokens]]\nname = \"ops\"\nsha256 = \"{hex}\"\nscope = \"admin\"\n"
    ))
    .await;
    let document: Value = serde_json::from_str(&app.text("/openapi.json").await).unwrap();
    let mut open = Vec::new();
    for (method, path, concrete) in operations(&document) {
        let security = &document["paths"][&path][method.to_lowercase()]["security"];
        let (status, body) = request(&app, &method, &concrete).await;
        if security == &serde_json::json!([{}]) {
            assert_ne!(status, 401, "{method} {path} is documented open: {body}");
            open.push(path);
        } else if security.is_null() {
            assert_eq!(status, 401, "{method} {path} needs a token: {body}");
        }
    }
    open.sort();
    assert_eq!(
        open,
        [
            "/console",
            "/console/{asset}",
            "/healthz",
            "/openapi.json",
            "/portal"
        ]
    );
    app.stop().await;
}

#[tokio::test]
async fn the_document_validates_and_a_live_server_keeps_to_it() {
    let (Some(validator), Some(schemathesis)) = (
        external_tool("openapi-spec-validator"),
        external_tool("schemathesis"),
    ) else {
        return;
    };
    let app = TestApp::start_guarded("").await;
    let file = app.dir.path().join("openapi.json");
    std::fs::write(&file, app.text("/openapi.json").await).unwrap();
    let validated = tokio::process::Command::new(&validator)
        .arg(&file)
        .output()
        .await
        .unwrap();
    assert!(
        validated.status.success(),
        "openapi-spec-validator: {}{}",
        String::from_utf8_lossy(&validated.stdout),
        String::from_utf8_lossy(&validated.stderr)
    );
    // Bounded: a fixed number of examples per operation, a fixed seed, and a time limit.
    let run = tokio::process::Command::new(&schemathesis)
        .args([
            "run",
            &format!("{}/openapi.json", app.base()),
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,\
             response_schema_conformance,response_headers_conformance",
            "--max-examples",
            "25",
            "--seed",
            "20261130",
            "--workers",
            "2",
            "--request-timeout",
            "10",
            "--no-color",
        ])
        .current_dir(app.dir.path())
        .kill_on_drop(true)
        .output();
    let run = tokio::time::timeout(std::time::Duration::from_secs(600), run)
        .await
        .expect("schemathesis ran within 10 minutes")
        .unwrap();
    let report = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "schemathesis found failures:\n{report}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    app.stop().await;
}

/// A test that skips for want of its tools says so where a plain `cargo test` shows it: run as
/// `cargo test` runs it (output captured), with no tool to be found, the test above passes and
/// its skip line is on the test process's stderr, naming it.
#[test]
fn a_skip_is_said_where_a_plain_cargo_test_shows_it() {
    // Its name in this binary: the module's path below the crate, then the function's.
    let test = "openapi::the_document_validates_and_a_live_server_keeps_to_it";
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test])
        .env_remove("HOOKLINE_TEST_TOOLS")
        .env_remove("HOOKLINE_TEST_TOOLS_REQUIRED")
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("1 passed"), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "SKIPPED {test}: openapi-spec-validator is not installed"
        )),
        "stdout: {stdout}\nstderr: {stderr}"
    );
}
