//! A browser for the tests of the pages hookline serves (`console.rs`, `portal.rs`): headless
//! Chromium driven by ChromeDriver over the W3C WebDriver protocol, and where the pages'
//! screenshots go.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

use crate::common::TestApp;

/// How long the browser may take to show something before the test fails.
const PATIENCE: Duration = Duration::from_secs(30);

/// A ChromeDriver process and one browser session in it, spoken to over HTTP on loopback.
pub struct Browser {
    driver: tokio::process::Child,
    http: reqwest::Client,
    session: String,
}

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Browser {
    pub async fn start(chromedriver: &Path) -> Self {
        use tokio::io::AsyncBufReadExt;
        // Port 0: ChromeDriver takes a free port and says which. Its own process group, so
        // that the browser it starts goes with it (`Drop`).
        let mut driver = tokio::process::Command::new(chromedriver)
            .arg("--port=0")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(driver.stdout.take().unwrap()).lines();
        let said = tokio::time::timeout(PATIENCE, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(port) =
                    line.strip_prefix("ChromeDriver was started successfully on port ")
                {
                    return port.trim_end_matches('.').parse::<u16>().ok();
                }
            }
            None
        });
        let port = said
            .await
            .ok()
            .flatten()
            .expect("chromedriver said on which port it listens");
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
            .into_iter()
            .find(|p| Path::new(p).exists());
        let mut options = json!({"args": [
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--window-size=1280,900",
        ]});
        if let Some(binary) = chromium {
            options["binary"] = json!(binary);
        }
        let created: Value = http
            .post(format!("{base}/session"))
            .json(&json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome", "goog:chromeOptions": options}}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {created}"))
            .to_owned();
        Browser {
            driver,
            http,
            session: format!("{base}/session/{session}"),
        }
    }

    pub async fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let request = self.http.request(method, format!("{}{path}", self.session));
        let request = match body {
            Some(body) => request.json(&body),
            None => request,
        };
        let answer: Value = request.send().await.unwrap().json().await.unwrap();
        answer["value"].clone()
    }

    pub async fn post(&self, path: &str, body: Value) -> Value {
        self.command(reqwest::Method::POST, path, Some(body)).await
    }

    pub async fn open(&self, url: &str) {
        self.post("/url", json!({"url": url})).await;
    }

    /// Runs `script` in the page and answers what it returns.
    pub async fn eval(&self, script: &str) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": []}))
            .await
    }

    /// Waits until `script` (an expression) is truthy in the page, and answers its value.
    pub async fn until(&self, what: &str, expression: &str) -> Value {
        let started = Instant::now();
        loop {
            let value = self.eval(&format!("return ({expression});")).await;
            if !(value.is_null() || value == json!(false) || value == json!("")) {
                return value;
            }
            if started.elapsed() > PATIENCE {
                let seen = self
                    .eval(
                        "return {ready: document.body.dataset.ready, \
                         url: location.href, \
                         flash: document.getElementById('flash')?.textContent, \
                         page: document.body.innerText.slice(0, 600)}",
                    )
                    .await;
                panic!("the page did not show {what} ({expression}); it shows {seen:#}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn ready(&self, page: &str) {
        self.until(
            &format!("the {page} page"),
            &format!("document.body.dataset.ready === '{page}'"),
        )
        .await;
    }

    pub async fn element(&self, selector: &str) -> String {
        self.until(
            selector,
            &format!("document.querySelector({selector:?}) !== null"),
        )
        .await;
        let found = self
            .post(
                "/element",
                json!({"using": "css selector", "value": selector}),
            )
            .await;
        found[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("finding {selector}: {found}"))
            .to_owned()
    }

    /// A real click, as a user's: the element must be visible and enabled. It is scrolled to
    /// the middle of the window first: where WebDriver would scroll it, the pages' sticky
    /// header may cover it.
    pub async fn click(&self, selector: &str) {
        let id = self.element(selector).await;
        self.post(
            "/execute/sync",
            json!({"script": "arguments[0].scrollIntoView({block: 'center'})",
                   "args": [{ELEMENT: id}]}),
        )
        .await;
        let done = self.post(&format!("/element/{id}/click"), json!({})).await;
        assert!(done.is_null(), "clicking {selector}: {done}");
    }

    pub async fn type_into(&self, selector: &str, text: &str) {
        let id = self.element(selector).await;
        for (command, body) in [("clear", json!({})), ("value", json!({"text": text}))] {
            let done = self.post(&format!("/element/{id}/{command}"), body).await;
            assert!(done.is_null(), "typing into {selector}: {done}");
        }
    }

    /// The token form, shown when the API wants a token.
    pub async fn token_form(&self) {
        self.until(
            "the token form",
            "!document.querySelector('#token-form').hidden",
        )
        .await;
    }

    pub async fn text(&self, selector: &str) -> String {
        let id = self.element(selector).await;
        self.command(reqwest::Method::GET, &format!("/element/{id}/text"), None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub async fn screenshot(&self, dir: &Path, name: &str) {
        let png = self
            .command(reqwest::Method::GET, "/screenshot", None)
            .await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap();
        std::fs::write(dir.join(format!("{name}.png")), bytes).unwrap();
    }

    /// Goes into the frame `selector` finds (commands then run in its page), or with `None`
    /// back to the top page.
    pub async fn frame(&self, selector: Option<&str>) {
        let id = match selector {
            Some(selector) => json!({ELEMENT: self.element(selector).await}),
            None => Value::Null,
        };
        let done = self.post("/frame", json!({"id": id})).await;
        assert!(done.is_null(), "into frame {selector:?}: {done}");
    }

    /// Loads the page again.
    pub async fn refresh(&self) {
        self.post("/refresh", json!({})).await;
    }

    /// Whether the page scrolls sideways at the browser's current width.
    pub async fn scrolls_sideways(&self) -> Value {
        self.eval(
            "return document.documentElement.scrollWidth > window.innerWidth \
             ? [document.documentElement.scrollWidth, window.innerWidth] : false",
        )
        .await
    }

    pub async fn quit(self) {
        self.command(reqwest::Method::DELETE, "", None).await;
    }
}

/// ChromeDriver and the browser it started go, whether the test passed or not.
impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(pid) = self.driver.id() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
        }
    }
}

/// Where screenshots go: `HOOKLINE_CONSOLE_SCREENSHOTS` when set (how `docs/console/` is
/// made), else the test's own directory.
pub fn screenshots(app: &TestApp) -> PathBuf {
    let shots = std::env::var_os("HOOKLINE_CONSOLE_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| app.dir.path().to_owned());
    std::fs::create_dir_all(&shots).unwrap();
    shots
}
