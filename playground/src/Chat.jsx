// One conversation on one branch, on the real client stack: agents/react's useAgent (the
// socket) and @cloudflare/ai-chat/react's useAgentChat (the AI SDK chat over it). Streaming,
// stop, regenerate, edit, tool approvals and client-tool answers are the hook's own; the
// sibling picker and the branch come from durachat's branch API (docs/branching.md).
import { useAgentChat } from "@cloudflare/ai-chat/react";
import { useAgent } from "agents/react";
import { useEffect, useState } from "react";

import { Message } from "./Message.jsx";

function authHeaders(token) {
  return token ? { Authorization: `Bearer ${token}` } : {};
}

/** The alternatives of each message, for the `< n / m >` pickers (refreshed after each turn). */
function useSiblings({ agentName, name, branch, token, messages, idle }) {
  const [siblings, setSiblings] = useState({});
  const key = messages.map((m) => m.id).join(",");
  useEffect(() => {
    if (!idle || messages.length === 0) return undefined;
    let cancelled = false;
    const query = new URLSearchParams({ branch, ...(token ? { token } : {}) });
    Promise.all(
      messages.map(async (message) => {
        const url = `/agents/${agentName}/${encodeURIComponent(name)}/messages/${encodeURIComponent(message.id)}/siblings?${query}`;
        const response = await fetch(url, { headers: authHeaders(token) });
        return [message.id, response.ok ? await response.json() : null];
      }),
    )
      .then((entries) => {
        if (!cancelled) setSiblings(Object.fromEntries(entries));
      })
      .catch(() => {});
    return () => {
      cancelled = true;
    };
  }, [agentName, name, branch, token, key, idle]);
  return siblings;
}

/** The branch's stored transcript, read once per mount (`get-messages?branch=`). */
export function Chat(props) {
  const { agentName, name, branch, token } = props;
  const [initial, setInitial] = useState(null);
  const [failed, setFailed] = useState(null);
  useEffect(() => {
    const query = new URLSearchParams({ ...(branch !== "main" ? { branch } : {}), ...(token ? { token } : {}) });
    fetch(`/agents/${agentName}/${encodeURIComponent(name)}/get-messages?${query}`, { headers: authHeaders(token) })
      .then(async (response) => {
        if (!response.ok) throw new Error(`get-messages answered ${response.status}: ${await response.text()}`);
        setInitial(await response.json());
      })
      .catch((error) => setFailed(error.message));
  }, [agentName, name, branch, token]);
  if (failed) return <div className="banner error">{failed}</div>;
  if (initial === null) return <p className="loading">loading the conversation…</p>;
  return <LiveChat {...props} initialMessages={initial} />;
}

function LiveChat({ agentName, name, branch, token, onBranch, initialMessages }) {
  const [connection, setConnection] = useState("connecting");
  const [draft, setDraft] = useState("");
  const agent = useAgent({
    agent: agentName,
    name,
    host: location.host,
    protocol: location.protocol === "https:" ? "wss" : "ws",
    query: { ...(branch !== "main" ? { branch } : {}), ...(token ? { token } : {}) },
    onOpen: () => setConnection("connected"),
    onClose: () => setConnection("reconnecting"),
  });
  // The transcript is loaded above, per branch: the hook's own initial fetch is cached per
  // conversation, not per branch.
  const chat = useAgentChat({ agent, getInitialMessages: null, messages: initialMessages });
  const { messages, status, isRecovering, isServerStreaming } = chat;
  const busy = status === "submitted" || status === "streaming" || isServerStreaming;
  const siblings = useSiblings({ agentName, name, branch, token, messages, idle: !busy });

  const send = (event) => {
    event.preventDefault();
    const text = draft.trim();
    if (!text) return;
    setDraft("");
    chat.sendMessage({ text });
  };

  return (
    <main className="chat">
      <div className="bar">
        <span data-testid="connection" className={`connection ${connection}`}>
          {connection === "connected" ? "● connected" : connection === "reconnecting" ? "○ reconnecting… (the reply resumes)" : "○ connecting…"}
        </span>
        <span data-testid="branch" className="branch">
          branch: {branch}
          {branch !== "main" && (
            <button type="button" data-testid="to-main" onClick={() => onBranch("main")}>
              back to main
            </button>
          )}
        </span>
        <span data-testid="status" className="status">
          {status}
          {isServerStreaming ? " (another tab's reply)" : ""}
        </span>
      </div>
      {isRecovering && (
        <div data-testid="recovering" className="banner">
          The server is recovering this reply after a failure; it continues in a moment.
        </div>
      )}
      {chat.error && (
        <div data-testid="error" className="banner error">
          {chat.error.message}
        </div>
      )}
      <ol className="messages">
        {messages.map((message) => (
          <Message
            key={message.id}
            message={message}
            siblings={siblings[message.id]}
            busy={busy}
            onBranch={onBranch}
            onEdit={(text) => chat.sendMessage({ text, messageId: message.id })}
            onApprove={(id, approved) => chat.addToolApprovalResponse({ id, approved })}
            onToolOutput={(part, output) =>
              chat.addToolOutput({ tool: part.type.replace(/^tool-/, ""), toolCallId: part.toolCallId, output })
            }
          />
        ))}
      </ol>
      <form className="composer" onSubmit={send}>
        <input
          data-testid="input"
          value={draft}
          placeholder="say something (try: slow, tool:Paris, approve:bob, client-tool:)"
          onChange={(e) => setDraft(e.target.value)}
        />
        <button type="submit" data-testid="send" disabled={!draft.trim()}>
          send
        </button>
        <button type="button" data-testid="stop" disabled={!busy} onClick={() => chat.stop()}>
          stop
        </button>
        <button type="button" data-testid="regenerate" disabled={busy || messages.length === 0} onClick={() => chat.regenerate()}>
          regenerate
        </button>
        <button type="button" data-testid="clear" disabled={messages.length === 0} onClick={() => chat.clearHistory()}>
          clear
        </button>
      </form>
    </main>
  );
}
