// Compatibility driver: runs one chat scenario against a durachat cluster with the REAL client
// stack that `useAgentChat` (agents/chat/react) is built from, minus React:
//
//   * `AgentClient` (agents/client), a PartySocket, given `ws` as its WebSocket implementation;
//   * `WebSocketChatTransport` (agents/chat/transport), constructed like useAgentChat does;
//   * the AI SDK chat state machine, `AbstractChat` (ai), over an in-memory `ChatState` shaped
//     like @ai-sdk/react's ReactChatState;
//   * the hook's own glue (initial `get-messages` fetch, the shared `onAgentMessage` frame handler,
//     resume on mount and on every close→open, `stop`, `clearHistory`), ported from
//     node_modules/agents/dist/chat/react.js line by line where it matters for these scenarios;
//     it uses the protocol constants `MessageType` from @cloudflare/ai-chat/types and the hook's
//     cross-tab observer state machine (`broadcastTransition`, agents/chat).
//
// (useAgentChat itself cannot run here: agents/chat/react imports react and @ai-sdk/react.)
//
// Usage: node driver.mjs <baseUrl[,baseUrl2]> <scenario> [agent] [name]
// Prints one JSON line; exits 0 on success, 1 on failure (with "reason").

import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

import { AbstractChat } from "ai";
import { MessageType } from "@cloudflare/ai-chat/types";
import { AgentClient } from "agents/client";
import { WebSocketChatTransport } from "agents/chat/transport";
import { STREAM_RESUME_NONE_REASONS, broadcastTransition as transition } from "agents/chat";
import WebSocket from "ws";

const SCENARIO_BUDGET_MS = 30_000;
const SLOW_DELTAS = Array.from({ length: 50 }, (_, i) => `s${String(i).padStart(2, "0")} `);
const SLOW_TEXT = SLOW_DELTAS.join("");
const T0 = Date.now();

// ---------------------------------------------------------------------------------------------
// Frame log (evidence for failures)

const frameLog = [];
function logFrame(tab, conn, dir, raw) {
  let frame;
  try {
    frame = JSON.parse(raw);
  } catch {
    frame = { nonJson: String(raw).slice(0, 200) };
  }
  frameLog.push({ t: Date.now() - T0, tab, conn, dir, frame });
}

/** A compact, human-readable rendering of one logged frame. */
function renderFrame({ t, tab, conn, dir, frame }) {
  const f = { ...frame };
  if (typeof f.body === "string" && f.body) {
    try {
      const chunk = JSON.parse(f.body);
      f.body = chunk.type === "text-delta" ? `text-delta:${JSON.stringify(chunk.delta)}` : chunk;
    } catch {
      /* keep the raw string */
    }
  }
  if (f.init && typeof f.init.body === "string") {
    try {
      const body = JSON.parse(f.init.body);
      f.init = {
        method: f.init.method,
        body: {
          ...body,
          messages: body.messages?.map((m) => `${m.role}:${m.id}:${JSON.stringify(textOf(m))}`),
        },
      };
    } catch {
      /* keep */
    }
  }
  if (Array.isArray(f.messages)) {
    f.messages = f.messages.map((m) => `${m.role}:${m.id}:${JSON.stringify(textOf(m))}`);
  }
  if (f.type === "cf_agent_mcp_servers") f.mcp = "…";
  return `${t}ms ${tab}#${conn} ${dir === "in" ? "<-" : "->"} ${JSON.stringify(f)}`;
}

// ---------------------------------------------------------------------------------------------
// Helpers

function textOf(message) {
  if (!message || !Array.isArray(message.parts)) return "";
  return message.parts
    .filter((p) => p.type === "text")
    .map((p) => p.text)
    .join("");
}

function summary(messages) {
  return messages.map((m) => ({ id: m.id, role: m.role, text: textOf(m) }));
}

class Failure extends Error {}

function check(condition, reason, details) {
  if (!condition) {
    const error = new Failure(reason);
    error.details = details;
    throw error;
  }
}

async function until(predicate, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = predicate();
    if (value) return value;
    if (Date.now() > deadline) throw new Failure(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(10);
  }
}

async function withTimeout(promise, timeoutMs, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Failure(`timed out after ${timeoutMs} ms waiting for ${what}`)), timeoutMs);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

async function getMessages(baseUrl, agent, name) {
  const response = await fetch(`${baseUrl}/agents/${agent}/${name}/get-messages`);
  const text = await response.text();
  check(response.ok, `GET get-messages answered ${response.status}`, { body: text.slice(0, 500) });
  return text.trim() ? JSON.parse(text) : [];
}

/** Wire frames of one request id, as seen by one tab. */
function responseFrames(tab, requestId) {
  return frameLog.filter(
    (e) => e.tab === tab && e.dir === "in" && e.frame.type === MessageType.CF_AGENT_USE_CHAT_RESPONSE && e.frame.id === requestId,
  );
}

function parsedChunk(frame) {
  if (typeof frame.body !== "string" || !frame.body.trim()) return null;
  try {
    return JSON.parse(frame.body);
  } catch {
    return null;
  }
}

/** Request ids this tab sent as `cf_agent_use_chat_request`, in order. */
function sentRequests(tab) {
  return frameLog
    .filter((e) => e.tab === tab && e.dir === "out" && e.frame.type === MessageType.CF_AGENT_USE_CHAT_REQUEST)
    .map((e) => ({ id: e.frame.id, body: JSON.parse(e.frame.init.body) }));
}

/**
 * The server must open every (non-continuation) stream with `start{messageId}` (PROTOCOL §13): the
 * AI SDK adopts that id for the assistant message, which is how the client's message, replays and
 * the persisted row line up. Returns the id, or fails with what came instead.
 */
function requireServerStart(tab, requestId) {
  const chunks = responseFrames(tab, requestId)
    .filter((e) => !e.frame.replay)
    .map((e) => parsedChunk(e.frame))
    .filter(Boolean);
  const first = chunks[0];
  check(
    first?.type === "start" && typeof first.messageId === "string" && first.messageId.startsWith("assistant_"),
    `the stream's first chunk is ${JSON.stringify(first)}, expected {"type":"start","messageId":"assistant_…"} (PROTOCOL §13); without it the AI SDK keeps a client-generated assistant id that matches neither the persisted row nor other tabs`,
    { firstChunks: chunks.slice(0, 3) },
  );
  return first.messageId;
}

function countDeltas(tab, requestId) {
  return responseFrames(tab, requestId).filter((e) => parsedChunk(e.frame)?.type === "text-delta").length;
}

// ---------------------------------------------------------------------------------------------
// The in-memory ChatState (what @ai-sdk/react's ReactChatState does, without React)

class MemoryChatState {
  constructor(messages, onChange) {
    this._messages = messages;
    this._status = "ready";
    this.error = undefined;
    this.statusHistory = ["ready"];
    this._onChange = onChange;
  }
  get status() {
    return this._status;
  }
  set status(value) {
    this._status = value;
    this.statusHistory.push(value);
    this._onChange("status");
  }
  get messages() {
    return this._messages;
  }
  set messages(value) {
    this._messages = [...value];
    this._onChange("messages");
  }
  pushMessage = (message) => {
    this._messages = this._messages.concat(message);
    this._onChange("messages");
  };
  popMessage = () => {
    this._messages = this._messages.slice(0, -1);
    this._onChange("messages");
  };
  replaceMessage = (index, message) => {
    this._messages = [...this._messages.slice(0, index), this.snapshot(message), ...this._messages.slice(index + 1)];
    this._onChange("messages");
  };
  snapshot = (value) => structuredClone(value);
}

class Chat extends AbstractChat {
  constructor({ messages, onChange, ...init }) {
    const state = new MemoryChatState(messages ?? [], onChange);
    super({ ...init, state });
    this.memoryState = state;
  }
}

// ---------------------------------------------------------------------------------------------
// Helpers copied from agents/dist/chat/react.js and broadcast-state (not exported publicly)

function findLastAssistantMessage(messages) {
  for (let index = messages.length - 1; index >= 0; index--) {
    const message = messages[index];
    if (message.role === "assistant") return { index, message };
  }
  return null;
}

function moveMessageToEnd(messages, messageId) {
  const idx = messages.findIndex((m) => m.id === messageId);
  if (idx < 0 || idx === messages.length - 1) return messages;
  const result = [...messages];
  const [msg] = result.splice(idx, 1);
  if (!msg) return messages;
  result.push(msg);
  return result;
}

function prependMissingHydratedMessages(hydratedMessages, currentMessages) {
  if (currentMessages.length === 0) return hydratedMessages;
  const currentMessageIds = new Set(currentMessages.map((message) => message.id));
  const missing = hydratedMessages.filter((message) => !currentMessageIds.has(message.id));
  if (missing.length === 0) return currentMessages;
  return [...missing, ...currentMessages];
}

function restoreBufferedSends(snapshot, local, bufferedIds) {
  if (bufferedIds.size === 0) return snapshot;
  const snapshotIds = new Set(snapshot.map((message) => message.id));
  const restored = local.filter((message) => bufferedIds.has(message.id) && !snapshotIds.has(message.id));
  return restored.length === 0 ? snapshot : [...snapshot, ...restored];
}

function observedDivergesFrom(accumulator, messages) {
  const existing = messages.find((m) => m.id === accumulator.messageId);
  if (!existing) return false;
  return !textOf({ parts: accumulator.parts }).startsWith(textOf(existing));
}

function collapseHydratedReplayTextParts(message) {
  const parts = message.parts;
  const nextParts = parts.filter((part, index) => {
    if (part.type !== "text" || !("text" in part) || !part.text) return true;
    return !parts.some((candidate, candidateIndex) => {
      if (candidateIndex <= index) return false;
      if (candidate.type !== "text" || !("text" in candidate) || !candidate.text) return false;
      return candidate.text.startsWith(part.text);
    });
  });
  return nextParts.length === parts.length ? message : { ...message, parts: nextParts };
}

// ---------------------------------------------------------------------------------------------
// Tab: one mounted `useAgentChat({agent: useAgent({agent, name})})`, without React

let tabCounter = 0;

class Tab {
  constructor(baseUrl, agentName, name, { label, reconnectDelayMs = 300 } = {}) {
    this.baseUrl = baseUrl;
    this.agentName = agentName;
    this.name = name;
    this.label = label ?? `tab${++tabCounter}`;
    this.reconnectDelayMs = reconnectDelayMs;
    this.conn = 0;
    this.opens = 0;
    this.closes = 0;
    this.receivedTypes = [];
    this.errors = [];
  }

  /** useAgent(): the AgentClient (a PartySocket) with `ws` as its WebSocket. */
  connect() {
    const url = new URL(this.baseUrl);
    const agent = new AgentClient({
      agent: this.agentName,
      name: this.name,
      host: url.host,
      protocol: url.protocol === "https:" ? "wss" : "ws",
      WebSocket,
      // Reconnect quickly so a dropped socket comes back while the slow stream still runs.
      minReconnectionDelay: this.reconnectDelayMs,
      maxReconnectionDelay: this.reconnectDelayMs * 4,
      connectionTimeout: 4000,
    });
    // Like useAgent's agent.getHttpUrl().
    agent.getHttpUrl = () => (agent._url || agent._pkurl || "").replace("ws://", "http://").replace("wss://", "https://");
    // Evidence: log every frame in both directions, per underlying connection.
    agent.addEventListener("open", () => {
      this.opens++;
      this.conn++;
    });
    agent.addEventListener("close", () => {
      this.closes++;
    });
    agent.addEventListener("message", (event) => {
      if (typeof event.data === "string") {
        logFrame(this.label, this.conn, "in", event.data);
        try {
          this.receivedTypes.push(JSON.parse(event.data).type);
        } catch {
          /* ignore */
        }
      }
    });
    const send = agent.send.bind(agent);
    agent.send = (data) => {
      logFrame(this.label, this.conn, "out", data);
      return send(data);
    };
    this.agent = agent;
    return agent;
  }

  async waitOpen(timeoutMs = 8000) {
    await until(() => this.agent.readyState === 1, timeoutMs, `${this.label}'s socket to open`);
  }

  /** The hook's default initial-messages loader: GET <socket url without _pk>/get-messages. */
  async fetchInitialMessages() {
    const raw = this.agent.getHttpUrl();
    const url = new URL(raw);
    url.searchParams.delete("_pk");
    this.agentUrl = url.toString();
    const getMessagesUrl = new URL(this.agentUrl);
    getMessagesUrl.pathname += "/get-messages";
    const response = await fetch(getMessagesUrl.toString());
    if (!response.ok) {
      this.errors.push(`initial get-messages ${response.status}`);
      return [];
    }
    const text = await response.text();
    if (!text.trim()) return [];
    return JSON.parse(text);
  }

  /** Everything useAgentChat does on first render and mount. */
  async mount() {
    if (!this.agent) this.connect();
    const initialMessages = await withTimeout(this.fetchInitialMessages(), 5000, "initial get-messages");
    this.initialMessages = initialMessages;

    // Hook state (refs).
    this.localRequestIds = new Set();
    this.pendingBufferedSendIds = new Set();
    this.pendingReplayResumeRequestIds = new Set();
    this.replayHydratedAssistantMessageIds = new Set();
    this.fallbackAckedResumeRequestIds = new Set();
    this.localResponseIds = new Map();
    this.protectedStreamingAssistant = null;
    this.streamState = { status: "idle" };
    this.isServerStreaming = false;
    this.resumeOperation = null;
    this.resumeGeneration = 0;
    this.reconnectProbePending = false;
    this.socketIsOpen = this.agent.readyState === 1;
    this.sawClose = false;
    this.disposed = false;
    this.observedChunks = 0;

    const agent = this.agent;
    this.transport = new WebSocketChatTransport({
      agent,
      activeRequestIds: this.localRequestIds,
      cancelOnClientAbort: false,
      onRequestBuffered: (messageId) => {
        if (messageId) this.pendingBufferedSendIds.add(messageId);
      },
      prepareBody: async () => ({}),
    });
    this.transport.setAgent(agent);
    this.transport.setCancelOnClientAbort(false);

    const agentUrl = new URL(this.agentUrl);
    const addressKey = JSON.stringify([[[agent.agent ?? "", agent.name ?? ""]], [agent.partySocketOptions.host ?? null, null, "agents", agent.agent, null]]);
    this.chat = new Chat({
      id: `${agentUrl.origin}${agentUrl.pathname}|${addressKey}`,
      messages: initialMessages,
      transport: this.transport,
      onError: (error) => this.errors.push(`chat onError: ${error.message}`),
      onChange: (what) => this.onChatChange(what),
    });
    // useEffect: seed hydrated messages (a no-op here, the Chat was built with them).
    this.setMessages((prev) => prependMissingHydratedMessages(initialMessages, prev));

    // useEffect: the shared frame handler + close/open tracking, then (same commit) resume on mount.
    this.onAgentMessage = (event) => this.handleAgentMessage(event);
    this.onAgentClose = () => this.handleAgentClose();
    this.onAgentOpen = () => this.handleAgentOpen();
    agent.addEventListener("message", this.onAgentMessage);
    agent.addEventListener("close", this.onAgentClose);
    agent.addEventListener("open", this.onAgentOpen);
    this.mountResume = this.resumeStream().catch((error) => this.errors.push(`mount resume: ${error.message}`));
    return this;
  }

  get messages() {
    return this.chat.messages;
  }

  get status() {
    return this.chat.status;
  }

  setMessages(update) {
    this.chat.messages = typeof update === "function" ? update(this.chat.messages) : update;
  }

  onChatChange(what) {
    if (what === "status") {
      // useEffect(() => reconnectProbeRunnerRef.current?.(), [status]) — after render.
      setTimeout(() => this.tryPendingReconnectProbe(), 0);
    } else if (what === "messages" && this.replayHydratedAssistantMessageIds?.size) {
      // useEffect on chatMessages: collapse duplicated text parts of a replay-hydrated assistant.
      setTimeout(() => {
        const ids = new Set(
          this.chat.messages
            .filter(
              (m) =>
                this.replayHydratedAssistantMessageIds.has(m.id) &&
                m.role === "assistant" &&
                collapseHydratedReplayTextParts(m) !== m,
            )
            .map((m) => m.id),
        );
        if (ids.size === 0) return;
        this.setMessages((prev) => prev.map((m) => (ids.has(m.id) ? collapseHydratedReplayTextParts(m) : m)));
      }, 0);
    }
  }

  // The hook's serialized resumeStream wrapper.
  resumeStream() {
    const active = this.resumeOperation;
    if (active) return active.promise;
    const operation = { generation: this.resumeGeneration, promise: Promise.resolve() };
    this.resumeOperation = operation;
    operation.promise = this.chat.resumeStream().finally(() => {
      if (this.resumeOperation !== operation || this.resumeGeneration !== operation.generation) return;
      this.resumeOperation = null;
      this.tryPendingReconnectProbe();
    });
    return operation.promise;
  }

  tryPendingReconnectProbe() {
    if (this.disposed || !this.socketIsOpen || !this.reconnectProbePending) return;
    if (this.transport.retryPendingResume()) {
      this.reconnectProbePending = false;
      return;
    }
    const status = this.chat.status;
    if ((status !== "ready" && status !== "error") || this.resumeOperation !== null) return;
    this.reconnectProbePending = false;
    this.resumeStream().catch(() => {});
  }

  handleAgentClose() {
    this.socketIsOpen = false;
    this.sawClose = true;
    this.fallbackAckedResumeRequestIds.clear();
    this.protectedStreamingAssistant = null;
  }

  handleAgentOpen() {
    this.socketIsOpen = true;
    if (!this.sawClose) return;
    this.sawClose = false;
    this.reconnectProbePending = true;
    this.tryPendingReconnectProbe();
  }

  preserveProtectedStreamingAssistant(messages, currentMessages) {
    const protection = this.protectedStreamingAssistant;
    if (!protection) return [...messages];
    const protectedIndex = messages.findIndex((message) => message.id === protection.assistantId);
    if (protectedIndex >= 0 && messages.slice(protectedIndex + 1).some((message) => message.role === "assistant")) {
      this.protectedStreamingAssistant = null;
      return [...messages];
    }
    const protectedAssistant =
      currentMessages.find((message) => message.id === protection.assistantId) ??
      messages.find((message) => message.id === protection.assistantId);
    if (!protectedAssistant) return [...messages];
    return [...messages.filter((message) => message.id !== protection.assistantId), protectedAssistant];
  }

  protectStreamingAssistantTail() {
    if (this.chat.status !== "streaming") return;
    this.setMessages((currentMessages) => {
      const info = findLastAssistantMessage(currentMessages);
      if (!info) return currentMessages;
      if (this.protectedStreamingAssistant?.assistantId !== info.message.id) {
        this.protectedStreamingAssistant = {
          assistantId: info.message.id,
          anchorMessageId: currentMessages[info.index - 1]?.id ?? null,
        };
      }
      return moveMessageToEnd(currentMessages, info.message.id);
    });
  }

  restoreProtectedStreamingAssistant(assistantId) {
    const protection = this.protectedStreamingAssistant;
    if (!protection || (assistantId !== undefined && protection.assistantId !== assistantId)) return;
    this.protectedStreamingAssistant = null;
    this.setMessages((prev) => {
      const sourceIdx = prev.findIndex((m) => m.id === protection.assistantId);
      if (sourceIdx < 0) return prev;
      const result = [...prev];
      const [msg] = result.splice(sourceIdx, 1);
      if (!msg) return prev;
      if (protection.anchorMessageId === null) result.unshift(msg);
      else {
        const anchorIdx = result.findIndex((m) => m.id === protection.anchorMessageId);
        result.splice(anchorIdx >= 0 ? anchorIdx + 1 : sourceIdx, 0, msg);
      }
      return result;
    });
  }

  resetMatchingHydratedAssistantForReplay(messageId) {
    this.setMessages((prev) => {
      const last = prev[prev.length - 1];
      if (!last || last.role !== "assistant" || last.id !== messageId) return prev;
      this.replayHydratedAssistantMessageIds.add(messageId);
      const next = [...prev];
      next[next.length - 1] = { ...last, parts: [] };
      return next;
    });
  }

  resetLocalChatState() {
    this.setMessages([]);
    this.localResponseIds.clear();
    this.pendingReplayResumeRequestIds.clear();
    this.fallbackAckedResumeRequestIds.clear();
    this.replayHydratedAssistantMessageIds.clear();
    this.protectedStreamingAssistant = null;
    this.pendingBufferedSendIds.clear();
    this.transport.appliedChunks.clear();
  }

  /** The hook's onAgentMessage (tool, recovery and onTurnEnd bookkeeping left out). */
  handleAgentMessage(event) {
    if (typeof event.data !== "string") return;
    let data;
    try {
      data = JSON.parse(event.data);
    } catch {
      return;
    }
    const transport = this.transport;
    switch (data.type) {
      case MessageType.CF_AGENT_CHAT_CLEAR:
        this.streamState = transition(this.streamState, { type: "clear" }).state;
        this.isServerStreaming = false;
        this.resetLocalChatState();
        break;
      case MessageType.CF_AGENT_CHAT_MESSAGES: {
        const bufferedSendIds = data.connect ? new Set(this.pendingBufferedSendIds) : new Set();
        this.pendingBufferedSendIds.clear();
        this.setMessages((currentMessages) => {
          let next = this.preserveProtectedStreamingAssistant(data.messages, currentMessages);
          const observed = this.streamState;
          if (observed.status === "observing" && observed.accumulator.parts.length > 0) {
            const snapshotIdx = next.findIndex((m) => m.id === observed.accumulator.messageId);
            const snapshotParts = snapshotIdx >= 0 ? next[snapshotIdx].parts.length : 0;
            if (observed.accumulator.parts.length >= snapshotParts && !observedDivergesFrom(observed.accumulator, next)) {
              next = observed.accumulator.mergeInto(next);
            }
          }
          return restoreBufferedSends(next, currentMessages, bufferedSendIds);
        });
        break;
      }
      case MessageType.CF_AGENT_MESSAGE_UPDATED:
        this.setMessages((prev) => {
          const updated = data.message;
          let idx = prev.findIndex((m) => m.id === updated.id);
          if (idx < 0) {
            const ids = new Set(updated.parts.filter((p) => "toolCallId" in p && p.toolCallId).map((p) => p.toolCallId));
            if (ids.size > 0) idx = prev.findIndex((m) => m.parts.some((p) => "toolCallId" in p && ids.has(p.toolCallId)));
          }
          if (idx < 0) return prev;
          const next = [...prev];
          next[idx] = { ...updated, id: prev[idx].id };
          return next;
        });
        break;
      case MessageType.CF_AGENT_STREAM_RESUME_NONE: {
        const handled = transport.handleStreamResumeNone(data);
        if (handled && data.reason === STREAM_RESUME_NONE_REASONS.IDLE && typeof data.probeId === "string") {
          const result = transition(this.streamState, { type: "clear" });
          this.streamState = result.state;
          this.isServerStreaming = result.isStreaming;
        }
        break;
      }
      case MessageType.CF_AGENT_STREAM_PENDING:
        transport.handleStreamPending();
        break;
      case MessageType.CF_AGENT_STREAM_RESUMING: {
        this.pendingReplayResumeRequestIds.add(data.id);
        if (transport.handleStreamResuming(data)) return;
        if (this.localRequestIds.has(data.id)) return;
        if (this.fallbackAckedResumeRequestIds.has(data.id)) return;
        this.streamState = transition(this.streamState, {
          type: "resume-fallback",
          streamId: data.id,
          messageId: randomUUID(),
        }).state;
        transport.observeServerTurn(data.id);
        this.isServerStreaming = true;
        this.fallbackAckedResumeRequestIds.add(data.id);
        this.agent.send(JSON.stringify({ type: MessageType.CF_AGENT_STREAM_RESUME_ACK, id: data.id }));
        break;
      }
      case MessageType.CF_AGENT_USE_CHAT_RESPONSE: {
        if (this.localRequestIds.has(data.id)) {
          if (data.body?.trim()) {
            try {
              const chunkData = JSON.parse(data.body);
              if (chunkData.type === "start" && typeof chunkData.messageId === "string") {
                const messageId = chunkData.messageId;
                this.localResponseIds.set(data.id, messageId);
                if (!data.continuation && this.protectedStreamingAssistant?.assistantId !== messageId) {
                  const current = this.chat.messages;
                  const idx = current.findIndex((message) => message.id === messageId);
                  this.protectedStreamingAssistant = {
                    assistantId: messageId,
                    anchorMessageId: idx >= 0 ? current[idx - 1]?.id ?? null : current[current.length - 1]?.id ?? null,
                  };
                }
                if (data.replay && !data.continuation) {
                  this.pendingReplayResumeRequestIds.delete(data.id);
                  this.resetMatchingHydratedAssistantForReplay(messageId);
                }
              }
            } catch {
              /* ignore */
            }
          }
          if (data.done || data.error || data.replayComplete) this.pendingReplayResumeRequestIds.delete(data.id);
          if (data.done || data.error) {
            if (this.streamState.status === "observing" && this.streamState.streamId === data.id) {
              this.streamState = { status: "idle" };
              this.isServerStreaming = false;
            }
            transport.handleServerTurnCompleted(data.id);
            this.restoreProtectedStreamingAssistant(this.localResponseIds.get(data.id));
            this.localResponseIds.delete(data.id);
            this.localRequestIds.delete(data.id);
            this.fallbackAckedResumeRequestIds.delete(data.id);
          }
          return;
        }
        let chunkData;
        if (data.replay && this.streamState.status !== "observing" && !this.pendingReplayResumeRequestIds.has(data.id)) return;
        if (
          data.done &&
          !data.error &&
          !(this.streamState.status === "observing" && this.streamState.streamId === data.id) &&
          !this.pendingReplayResumeRequestIds.has(data.id)
        ) {
          transport.appliedChunks.forget(data.id);
          transport.handleServerTurnCompleted(data.id);
          this.fallbackAckedResumeRequestIds.delete(data.id);
          break;
        }
        if (data.error) {
          this.pendingReplayResumeRequestIds.delete(data.id);
          transport.appliedChunks.forget(data.id);
          transport.handleServerTurnCompleted(data.id);
          this.fallbackAckedResumeRequestIds.delete(data.id);
          if (this.streamState.status === "idle" || this.streamState.streamId === data.id) {
            const result = transition(this.streamState, { type: "clear" });
            this.streamState = result.state;
            this.isServerStreaming = result.isStreaming;
          }
          break;
        }
        const appliedReplay = transport.appliedChunks.isAppliedReplay(data.id, data);
        if (data.body?.trim()) {
          try {
            chunkData = JSON.parse(data.body);
            if (data.replay && !data.continuation && typeof chunkData.messageId === "string" && chunkData.type === "start") {
              this.pendingReplayResumeRequestIds.delete(data.id);
              this.resetMatchingHydratedAssistantForReplay(chunkData.messageId);
            }
          } catch (error) {
            this.errors.push(`unparsable chunk body: ${String(data.body).slice(0, 100)}`);
          }
        }
        if (data.done || data.replayComplete) this.pendingReplayResumeRequestIds.delete(data.id);
        if (data.done) {
          transport.handleServerTurnCompleted(data.id);
          this.fallbackAckedResumeRequestIds.delete(data.id);
        }
        const alreadyApplied = appliedReplay && chunkData?.type !== "start";
        if (data.done) transport.appliedChunks.forget(data.id);
        else if (!alreadyApplied) transport.appliedChunks.record(data.id, data.seq);
        if (chunkData) this.observedChunks++;
        const result = transition(this.streamState, {
          type: "response",
          streamId: data.id,
          messageId: randomUUID(),
          chunkData: alreadyApplied ? undefined : chunkData,
          done: data.done,
          error: data.error,
          replay: data.replay,
          replayComplete: data.replayComplete,
          continuation: data.continuation,
        });
        this.streamState = result.state;
        if (result.messagesUpdate) this.setMessages(result.messagesUpdate);
        this.isServerStreaming = result.isStreaming;
        break;
      }
      default:
        break;
    }
  }

  // ---- what the hook returns ------------------------------------------------------------------

  /** sendMessage (sendMessageWithStreamingProtection). */
  send(text) {
    const request = this.chat.sendMessage({ text });
    this.protectStreamingAssistantTail();
    return request;
  }

  /** stop (stopWithToolContinuationAbort): cancel the server turn, then the AI SDK's stop. */
  async stop() {
    try {
      this.transport.cancelActiveServerTurn();
      await this.chat.stop();
    } finally {
      this.transport.abortActiveToolContinuation();
    }
  }

  /** clearHistory. */
  clearHistory() {
    this.resetLocalChatState();
    this.agent.send(JSON.stringify({ type: MessageType.CF_AGENT_CHAT_CLEAR }));
  }

  regenerate() {
    return this.chat.regenerate();
  }

  /** Unmount + drop the socket. */
  destroy() {
    if (this.disposed) return;
    this.disposed = true;
    if (this.agent && this.onAgentMessage) {
      this.agent.removeEventListener("message", this.onAgentMessage);
      this.agent.removeEventListener("close", this.onAgentClose);
      this.agent.removeEventListener("open", this.onAgentOpen);
    }
    this.transport?.resetResumeState();
    this.resumeGeneration++;
    this.resumeOperation = null;
    try {
      this.agent?.close();
    } catch {
      /* ignore */
    }
  }

  snapshot() {
    return {
      label: this.label,
      pk: this.agent?._pk,
      status: this.chat?.status,
      statusHistory: this.chat?.memoryState.statusHistory,
      messages: this.chat ? summary(this.chat.messages) : undefined,
      opens: this.opens,
      closes: this.closes,
      errors: this.errors,
    };
  }
}

// ---------------------------------------------------------------------------------------------
// Scenarios

const tabs = [];
function newTab(baseUrl, agent, name, options) {
  const tab = new Tab(baseUrl, agent, name, options);
  tabs.push(tab);
  return tab;
}

async function mounted(baseUrl, agent, name, options) {
  const tab = newTab(baseUrl, agent, name, options);
  tab.connect();
  await tab.waitOpen();
  await withTimeout(tab.agent.ready, 5000, `${tab.label}: cf_agent_identity (AgentClient.ready)`);
  await tab.mount();
  // A freshly mounted idle tab settles its mount-time resume probe quickly (resume_none idle).
  await withTimeout(tab.mountResume, 7000, `${tab.label}: mount-time resume probe to settle`);
  return tab;
}

async function waitForDeltas(tab, count, timeoutMs = 8000) {
  return until(
    () => {
      const req = sentRequests(tab.label).at(-1);
      return req && countDeltas(tab.label, req.id) >= count ? req : null;
    },
    timeoutMs,
    `${tab.label} to receive ${count} text-delta chunks`,
  );
}

function assistantOf(messages) {
  return messages.filter((m) => m.role === "assistant");
}

async function settledGet(baseUrl, agent, name, predicate, what, timeoutMs = 3000) {
  let last;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    last = await getMessages(baseUrl, agent, name);
    if (predicate(last)) return last;
    if (Date.now() > deadline) {
      check(false, `get-messages never showed ${what}`, { lastGet: summary(last) });
    }
    await sleep(100);
  }
}

const scenarios = {
  async chat({ urls, agent, name }, observed) {
    const a = await mounted(urls[0], agent, name);
    await withTimeout(a.send("hello world"), 10_000, "sendMessage to finish");
    observed.tab = a.snapshot();
    check(a.status === "ready", `status is ${a.status}, expected ready`, { error: a.chat.error?.message });
    const hist = a.chat.memoryState.statusHistory;
    check(hist.includes("submitted") && hist.includes("streaming"), "status never went submitted → streaming", { hist });
    const msgs = a.messages;
    check(msgs.length === 2, `client holds ${msgs.length} messages, expected 2`);
    check(msgs[0].role === "user" && textOf(msgs[0]) === "hello world", "first message is not the user's", {});
    check(msgs[1].role === "assistant", "second message is not an assistant");
    check(textOf(msgs[1]) === "echo: hello world", `assistant text is ${JSON.stringify(textOf(msgs[1]))}`);
    const history = await settledGet(urls[0], agent, name, (h) => h.length >= 2, "2 messages");
    observed.get = summary(history);
    const req = sentRequests(a.label)[0];
    const serverId = requireServerStart(a.label, req.id);
    check(msgs[1].id === serverId, `client assistant id ${msgs[1].id} is not the server-stamped ${serverId}`);
    check(history.length === 2, `get-messages returned ${history.length} messages`);
    check(
      history.every((m, i) => m.id === msgs[i].id && m.role === msgs[i].role && textOf(m) === textOf(msgs[i])),
      "get-messages differs from the client state",
      { client: summary(msgs) },
    );
  },

  async "resume-drop"({ urls, agent, name }, observed) {
    const a = await mounted(urls[0], agent, name);
    const pk = a.agent._pk;
    const sending = a.send("slow").catch((e) => a.errors.push(`send: ${e.message}`));
    const req = await waitForDeltas(a, 5);
    const connBefore = a.conn;
    // Drop the underlying socket like a network failure (no close handshake); PartySocket reconnects.
    a.agent._ws.terminate();
    await until(() => a.opens >= 2 && a.agent.readyState === 1, 10_000, "PartySocket to reconnect");
    check(a.agent._pk === pk && String(a.agent._ws.url).includes(`_pk=${pk}`), "reconnect did not reuse _pk", {
      url: a.agent._ws.url,
    });
    await withTimeout(sending, 15_000, "the interrupted sendMessage to settle");
    await until(
      () => a.status === "ready" && a.resumeOperation === null && !a.reconnectProbePending && textOf(assistantOf(a.messages).at(-1)) === SLOW_TEXT,
      15_000,
      "the resumed stream to complete the assistant message",
    ).catch((error) => {
      throw Object.assign(error, { details: { text: textOf(assistantOf(a.messages).at(-1)) } });
    });
    // Give any duplicate replay a chance to show up.
    await sleep(300);
    observed.tab = a.snapshot();
    const serverId = requireServerStart(a.label, req.id);
    const msgs = a.messages;
    check(msgs.length === 2, `client holds ${msgs.length} messages, expected 2`);
    check(textOf(msgs[1]) === SLOW_TEXT, "assistant text is not the 50 deltas exactly once", { text: textOf(msgs[1]) });
    const acks = frameLog.filter((e) => e.tab === a.label && e.dir === "out" && e.frame.type === MessageType.CF_AGENT_STREAM_RESUME_ACK && e.conn > connBefore);
    observed.acksAfterReconnect = acks.length;
    check(msgs[1].id === serverId, `assistant id ${msgs[1].id} is not the stream's ${serverId}`);
    const history = await settledGet(urls[0], agent, name, (h) => h.length === 2 && textOf(h[1]) === SLOW_TEXT, "the completed turn");
    check(history[1].id === msgs[1].id, "persisted assistant id differs from the client's");
  },

  async "resume-reload"({ urls, agent, name }, observed) {
    const a = await mounted(urls[0], agent, name);
    a.send("slow").catch(() => {});
    const req = await waitForDeltas(a, 5);
    a.destroy();
    // A reload: a brand-new AgentClient (new _pk), initial messages via get-messages, resume on mount.
    const b = newTab(urls.at(-1), agent, name, { label: "reload" });
    b.connect();
    await b.waitOpen();
    await b.mount();
    observed.initialMessages = summary(b.initialMessages);
    check(b.agent._pk !== a.agent._pk, "the reloaded client reused the old _pk");
    await until(
      () => b.status === "ready" && b.resumeOperation === null && textOf(assistantOf(b.messages).at(-1)) === SLOW_TEXT,
      20_000,
      "the resumed stream to complete the assistant message",
    ).catch((error) => {
      throw Object.assign(error, { details: { text: textOf(assistantOf(b.messages).at(-1)), status: b.status } });
    });
    await sleep(300);
    observed.tab = b.snapshot();
    const hist = b.chat.memoryState.statusHistory;
    check(hist.includes("streaming"), "the resumed chat never reached status streaming", { hist });
    const msgs = b.messages;
    check(msgs.length === 2, `client holds ${msgs.length} messages, expected 2`);
    check(msgs[0].role === "user" && textOf(msgs[0]) === "slow", "first message is not the user's");
    check(textOf(msgs[1]) === SLOW_TEXT, "assistant text is not the 50 deltas exactly once", { text: textOf(msgs[1]) });
    const acksSoFar = frameLog.filter((e) => e.tab === b.label && e.dir === "out" && e.frame.type === MessageType.CF_AGENT_STREAM_RESUME_ACK);
    check(acksSoFar.length === 1, `the reloaded client sent ${acksSoFar.length} resume ACKs, expected 1`);
    const serverId = requireServerStart(a.label, req.id);
    check(msgs[1].id === serverId, `assistant id ${msgs[1].id} is not the stream's ${serverId}`);
    const acks = frameLog.filter((e) => e.tab === b.label && e.dir === "out" && e.frame.type === MessageType.CF_AGENT_STREAM_RESUME_ACK);
    observed.acks = acks.length;
    const history = await settledGet(urls[0], agent, name, (h) => h.length === 2 && textOf(h[1]) === SLOW_TEXT, "the completed turn");
    check(history[1].id === msgs[1].id, "persisted assistant id differs from the client's");
  },

  async cancel({ urls, agent, name }, observed) {
    const a = await mounted(urls[0], agent, name);
    const sending = a.send("slow").catch((e) => a.errors.push(`send: ${e.message}`));
    const req = await waitForDeltas(a, 5);
    await withTimeout(a.stop(), 5000, "stop()");
    await withTimeout(sending, 5000, "sendMessage to settle after stop()");
    const cancelFrame = frameLog.find((e) => e.tab === a.label && e.dir === "out" && e.frame.type === MessageType.CF_AGENT_CHAT_REQUEST_CANCEL);
    check(cancelFrame && cancelFrame.frame.id === req.id, "stop() did not send cf_agent_chat_request_cancel for the request", {});
    // The server must end the turn: a done frame for the request.
    const done = await until(
      () => responseFrames(a.label, req.id).find((e) => e.frame.done === true),
      5000,
      "the done frame of the cancelled turn",
    );
    await sleep(500);
    observed.tab = a.snapshot();
    observed.doneFrame = done.frame;
    check(a.status === "ready", `status is ${a.status} after stop()`, { error: a.chat.error?.message });
    const frames = responseFrames(a.label, req.id);
    const wireText = frames
      .map((e) => parsedChunk(e.frame))
      .filter((c) => c?.type === "text-delta")
      .map((c) => c.delta)
      .join("");
    const afterDone = frames.filter((e) => e.t > done.t);
    observed.wireDeltas = countDeltas(a.label, req.id);
    check(afterDone.length === 0, `${afterDone.length} frames for the request arrived after its done frame`);
    check(wireText.length > 0 && wireText.length < SLOW_TEXT.length && SLOW_TEXT.startsWith(wireText), "the reply did not stop early", {
      wireText,
    });
    if (done.frame.outcome !== "aborted") observed.deviation = `done frame has outcome ${JSON.stringify(done.frame.outcome)}, reference sends "aborted"`;
    const msgs = a.messages;
    check(msgs.length === 2 && msgs[1].role === "assistant", "client does not hold user + partial assistant");
    const clientText = textOf(msgs[1]);
    check(clientText.length > 0 && wireText.startsWith(clientText), "client text is not a prefix of the wire text", { clientText, wireText });
    const history = await settledGet(urls[0], agent, name, (h) => h.length === 2 && textOf(h[1]).length > 0, "the partial assistant");
    observed.get = summary(history);
    check(textOf(history[1]) === wireText, "persisted partial text differs from what was streamed", {
      persisted: textOf(history[1]),
      wireText,
    });
    const serverId = requireServerStart(a.label, req.id);
    check(msgs[1].id === serverId, `client assistant id ${msgs[1].id} is not the stream's ${serverId}`);
    check(history[1].id === serverId, `persisted assistant id ${history[1].id} is not the stream's ${serverId}`);
  },

  async clear({ urls, agent, name }, observed) {
    const a = await mounted(urls[0], agent, name);
    const peer = await mounted(urls.at(-1), agent, name, { label: "peer" });
    await withTimeout(a.send("hello world"), 10_000, "sendMessage to finish");
    check(textOf(a.messages[1]) === "echo: hello world", "the first chat failed");
    await until(() => peer.messages.length === 2, 5000, "the peer tab to show the chat");
    const before = await settledGet(urls[0], agent, name, (h) => h.length === 2, "2 messages before clear");
    a.clearHistory();
    check(a.messages.length === 0, "clearHistory left local messages");
    await until(() => peer.messages.length === 0, 5000, "the peer tab to be cleared (cf_agent_chat_clear broadcast)");
    const history = await settledGet(urls[0], agent, name, (h) => h.length === 0, "[] after clear");
    await sleep(300);
    observed.tab = a.snapshot();
    observed.peer = peer.snapshot();
    observed.getBefore = before.length;
    observed.getAfter = history;
    check(a.messages.length === 0, "the clearing tab got messages back after clear", { messages: summary(a.messages) });
    const echoed = frameLog.filter((e) => e.tab === a.label && e.dir === "in" && e.frame.type === MessageType.CF_AGENT_CHAT_CLEAR);
    if (echoed.length) observed.deviation = "the sender received its own cf_agent_chat_clear (reference: sender gets nothing)";
  },

  async regenerate({ urls, agent, name }, observed) {
    const a = await mounted(urls[0], agent, name);
    await withTimeout(a.send("hello world"), 10_000, "sendMessage to finish");
    const first = a.messages[1];
    check(first && textOf(first) === "echo: hello world", "the first chat failed", { messages: summary(a.messages) });
    const before = await settledGet(urls[0], agent, name, (h) => h.length === 2, "the first turn persisted");
    await withTimeout(a.regenerate(), 10_000, "regenerate to finish");
    observed.tab = a.snapshot();
    observed.firstAssistantId = first.id;
    observed.getBefore = summary(before);
    const req = sentRequests(a.label).at(-1);
    check(req.body.trigger === "regenerate-message", `request trigger is ${req.body.trigger}`);
    check(req.body.messages.length === 1 && req.body.messages[0].role === "user", "regenerate request did not carry just the user message");
    check(a.status === "ready", `status is ${a.status}`, { error: a.chat.error?.message });
    const msgs = a.messages;
    check(msgs.length === 2, `client holds ${msgs.length} messages, expected one user + one assistant`);
    check(msgs[0].role === "user" && msgs[1].role === "assistant", "wrong roles");
    check(textOf(msgs[1]) === "echo: hello world", `regenerated text is ${JSON.stringify(textOf(msgs[1]))}`);
    check(msgs[1].id !== first.id, "the regenerated assistant kept the old id");
    const history = await settledGet(
      urls[0],
      agent,
      name,
      (h) => h.length === 2 && h[1].role === "assistant" && h[1].id !== before[1].id,
      "exactly the user + a new assistant",
    );
    observed.get = summary(history);
    check(history[0].id === msgs[0].id && textOf(history[1]) === "echo: hello world", "persisted transcript is wrong");
    const serverId = requireServerStart(a.label, req.id);
    check(msgs[1].id === serverId, `client assistant id ${msgs[1].id} is not the stream's ${serverId}`);
    check(history[1].id === serverId, `persisted assistant id ${history[1].id} is not the stream's ${serverId}`);
  },

  async "two-tabs"({ urls, agent, name }, observed) {
    const a = await mounted(urls[0], agent, name, { label: "tabA" });
    const b = await mounted(urls.at(-1), agent, name, { label: "tabB" });
    let bPeakAssistantText = "";
    const watch = setInterval(() => {
      const t = textOf(assistantOf(b.messages).at(-1));
      if (t.length > bPeakAssistantText.length) bPeakAssistantText = t;
    }, 5);
    try {
      await withTimeout(a.send("hello world"), 10_000, "tab A's sendMessage to finish");
      check(a.status === "ready" && a.messages.length === 2, "tab A did not finish its turn", { a: a.snapshot() });
      const same = (x, y) =>
        x.length === y.length && x.every((m, i) => m.id === y[i].id && m.role === y[i].role && textOf(m) === textOf(y[i]));
      const converged = await until(() => same(b.messages, a.messages), 5000, "tab B to show the same messages as tab A").catch(
        (error) => error,
      );
      observed.tabA = a.snapshot();
      observed.tabB = b.snapshot();
      observed.tabBPeakAssistantText = bPeakAssistantText;
      requireServerStart(a.label, sentRequests(a.label)[0].id);
      if (converged instanceof Error) throw Object.assign(converged, { details: { a: summary(a.messages), b: summary(b.messages) } });
      await sleep(300);
    } finally {
      clearInterval(watch);
    }
    observed.tabA = a.snapshot();
    observed.tabB = b.snapshot();
    observed.tabBObservedChunks = b.observedChunks;
    observed.tabBChatMessagesFrames = b.receivedTypes.filter((t) => t === MessageType.CF_AGENT_CHAT_MESSAGES).length;
    check(
      b.messages.length === 2 && b.messages.every((m, i) => m.id === a.messages[i].id && textOf(m) === textOf(a.messages[i])),
      "tab B diverged after settling",
      { a: summary(a.messages), b: summary(b.messages) },
    );
    check(b.observedChunks > 0, "tab B never received the live chunk frames of tab A's turn");
    check(b.status === "ready", `tab B status is ${b.status}`);
  },
};

// ---------------------------------------------------------------------------------------------
// Main

async function main() {
  const [baseArg, scenario, agentArg, nameArg] = process.argv.slice(2);
  const out = { scenario, ok: false };
  const finish = (code, extra) => {
    Object.assign(out, extra);
    for (const tab of tabs) {
      try {
        tab.destroy();
      } catch {
        /* ignore */
      }
    }
    process.stdout.write(`${JSON.stringify(out)}\n`, () => process.exit(code));
  };
  if (!baseArg || !scenarios[scenario]) {
    finish(1, {
      reason: `usage: node driver.mjs <baseUrl[,baseUrl2]> <${Object.keys(scenarios).join("|")}> [agent] [name]`,
    });
    return;
  }
  const urls = baseArg.split(",").map((u) => u.trim().replace(/\/$/, "")).filter(Boolean);
  const agent = agentArg || "chat-agent";
  const name = nameArg || `compat-${scenario}-${randomUUID().slice(0, 8)}`;
  Object.assign(out, { urls, agent, name });
  const observed = {};
  const budget = setTimeout(() => {
    finish(1, {
      reason: `scenario did not finish within ${SCENARIO_BUDGET_MS} ms`,
      observed,
      tabs: tabs.map((t) => (t.chat ? t.snapshot() : { label: t.label })),
      frames: frameLog.map(renderFrame),
    });
  }, SCENARIO_BUDGET_MS);
  try {
    await scenarios[scenario]({ urls, agent, name }, observed);
    clearTimeout(budget);
    // COMPAT_DRIVER_FRAMES=1 keeps the frame log on success too (for reading the wire).
    finish(0, { ok: true, ms: Date.now() - T0, observed, ...(process.env.COMPAT_DRIVER_FRAMES ? { frames: frameLog.map(renderFrame) } : {}) });
  } catch (error) {
    clearTimeout(budget);
    finish(1, {
      reason: error instanceof Failure ? error.message : `driver error: ${error?.stack ?? error}`,
      details: error?.details,
      observed,
      tabs: tabs.map((t) => (t.chat ? t.snapshot() : { label: t.label })),
      frames: frameLog.map(renderFrame),
    });
  }
}

process.on("unhandledRejection", (error) => {
  // A stray rejection inside the client stack must not kill the run silently; record it.
  for (const tab of tabs) tab.errors.push(`unhandledRejection: ${error?.message ?? error}`);
});

main();
