// The playground's shell: which agent, conversation and branch to view, and the token for
// clusters with auth. The chat itself is Chat.jsx; it is mounted anew for every
// conversation and branch, so each view loads its own transcript and resumes its own stream.
import { Suspense, useState } from "react";

import { Chat } from "./Chat.jsx";

const RECENT_KEY = "durachat.playground.recent";
const TOKEN_KEY = "durachat.playground.token";

function readParams() {
  const params = new URLSearchParams(location.search);
  return {
    agent: params.get("agent") || "chat-agent",
    name: params.get("name") || "",
    branch: params.get("branch") || "",
  };
}

function writeParams({ agent, name, branch }) {
  const params = new URLSearchParams();
  if (agent !== "chat-agent") params.set("agent", agent);
  if (name) params.set("name", name);
  if (branch && branch !== "main") params.set("branch", branch);
  const query = params.toString();
  history.replaceState(null, "", `${location.pathname}${query ? `?${query}` : ""}`);
}

function randomName() {
  return `chat-${Math.random().toString(36).slice(2, 8)}`;
}

function recentNames() {
  try {
    return JSON.parse(localStorage.getItem(RECENT_KEY) || "[]");
  } catch {
    return [];
  }
}

export function App() {
  const initial = readParams();
  const [view, setView] = useState(() => ({ ...initial, name: initial.name || randomName() }));
  const [draftName, setDraftName] = useState(view.name);
  const [draftAgent, setDraftAgent] = useState(view.agent);
  const [token, setToken] = useState(() => localStorage.getItem(TOKEN_KEY) || "");
  const [recent, setRecent] = useState(recentNames);

  const show = (next) => {
    const merged = { ...view, ...next };
    setView(merged);
    writeParams(merged);
    if (merged.name && !recent.includes(merged.name)) {
      const names = [merged.name, ...recent].slice(0, 20);
      setRecent(names);
      localStorage.setItem(RECENT_KEY, JSON.stringify(names));
    }
  };

  if (!initial.name || initial.name !== view.name) writeParams(view);

  return (
    <div className="app">
      <header>
        <h1>durachat playground</h1>
        <form
          className="settings"
          onSubmit={(event) => {
            event.preventDefault();
            show({ agent: draftAgent.trim() || "chat-agent", name: draftName.trim() || randomName(), branch: "" });
          }}
        >
          <label>
            agent <input data-testid="agent" value={draftAgent} onChange={(e) => setDraftAgent(e.target.value)} />
          </label>
          <label>
            conversation{" "}
            <input data-testid="conversation" list="recent" value={draftName} onChange={(e) => setDraftName(e.target.value)} />
            <datalist id="recent">
              {recent.map((name) => (
                <option key={name} value={name} />
              ))}
            </datalist>
          </label>
          <button type="submit" data-testid="open">
            open
          </button>
          <button
            type="button"
            data-testid="new"
            onClick={() => {
              const name = randomName();
              setDraftName(name);
              show({ name, branch: "" });
            }}
          >
            new
          </button>
          <label>
            token{" "}
            <input
              data-testid="token"
              type="password"
              placeholder="for clusters with auth"
              value={token}
              onChange={(e) => {
                setToken(e.target.value);
                localStorage.setItem(TOKEN_KEY, e.target.value);
              }}
            />
          </label>
        </form>
      </header>
      <Suspense fallback={<p className="loading">loading the conversation…</p>}>
        <Chat
          key={`${view.agent}|${view.name}|${view.branch}|${token}`}
          agentName={view.agent}
          name={view.name}
          branch={view.branch || "main"}
          token={token}
          onBranch={(branch) => show({ branch })}
        />
      </Suspense>
    </div>
  );
}
