// Compatibility driver: runs one chat scenario against a durachat cluster with the REAL client
// stack that `useAgentChat` (agents/chat/react) is built from, minus React:
//
//   * `AgentClient` (agents/client), a PartySocket, given `ws` as its WebSocket implementation
//     (set to deliver one message per task, like a browser: see BrowserLikeWebSocket);
//   * `WebSocketChatTransport` (agents/chat/transport), constructed like useAgentChat does;
//   * the AI SDK chat state machine, `AbstractChat` (ai), over an in-memory `ChatState` shaped
//     like @ai-sdk/react's ReactChatState;
//   * the hook's own glue (initial `get-messages` fetch, the shared `onAgentMessage` frame handler,
//     resume on mount and on every close→open, `stop`, `clearHistory`, and the tool plumbing:
//     `onToolCall` + `addToolOutput`, `addToolApprovalResponse`, `autoContinueAfterToolResult`
//     (default true), the tool continuation via `expectToolContinuation()` + resume), ported from
//     node_modules/agents/dist/chat/react.js line by line where it matters for these scenarios;
//     it uses the protocol constants `MessageType` from @cloudflare/ai-chat/types and the hook's
//     cross-tab observer state machine (`broadcastTransition`, agents/chat); `onData` goes to the
//     AI SDK chat and, for observed streams, is called by the hook as useAgentChat does.
//
// Most scenarios talk to the demo agent `chat-agent`; the streaming-tool, data-part and
// messageConcurrency ones talk to test agents (tests/support/compat_agents.py, support/agents.py):
// see SCENARIO_AGENTS.
//
// (useAgentChat itself cannot run here: agents/chat/react imports react and @ai-sdk/react.)
//
// Usage: node driver.mjs <baseUrl[,baseUrl2]> <scenario> [agent] [name]
// Prints one JSON line; exits 0 on success, 1 on failure (with "reason").

import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

import { AbstractChat, getToolName, isToolUIPart } from "ai";
import { MessageType } from "@cloudflare/ai-chat/types";
import { AgentClient } from "agents/client";
import { WebSocketChatTransport } from "agents/chat/transport";
import { STREAM_RESUME_NONE_REASONS, broadcastTransition as transition } from "agents/chat";
import WebSocket from "ws";

import { aisdkScenarios } from "./aisdk.mjs";

/**
 * `ws` with a browser's event delivery. By default a `ws` client emits every message of one TCP read
 * synchronously, back to back; a browser dispatches each WebSocket message as its own task, so the
 * promise jobs the previous frame started (the AI SDK applies stream chunks in microtasks) finish
 * before the next frame's handler runs. `allowSynchronousEvents: false` defers each further message
 * to its own macrotask, as a browser does; without it the driver invents races a browser cannot
 * have (e.g. the hook's `cf_agent_chat_messages` handler running before the AI SDK applied the chunks
 * that preceded it on the wire).
 */
class BrowserLikeWebSocket extends WebSocket {
  constructor(address, protocols, options) {
    super(address, protocols, { ...options, allowSynchronousEvents: false });
  }
}

const SCENARIO_BUDGET_MS = 30_000;
// A cluster that requires credentials (docs/security.md): COMPAT_TOKEN is a client token every
// tab passes as useAgent's `query: {token}` (and so on its get-messages), as a browser app does.
const AUTH_TOKEN = process.env.COMPAT_TOKEN || "";
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
          messages: body.messages?.map(renderMessage),
        },
      };
    } catch {
      /* keep */
    }
  }
  if (Array.isArray(f.messages)) {
    f.messages = f.messages.map(renderMessage);
  }
  if (f.message && typeof f.message === "object") f.message = renderMessage(f.message);
  if (f.type === "cf_agent_mcp_servers") f.mcp = "…";
  return `${t}ms ${tab}#${conn} ${dir === "in" ? "<-" : dir === "close" ? "xx" : "->"} ${JSON.stringify(f)}`;
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

/** The tool parts of a message, reduced to what the tool scenarios check. */
function toolsOf(message) {
  if (!message || !Array.isArray(message.parts)) return [];
  return message.parts
    .filter((p) => typeof p.type === "string" && (p.type.startsWith("tool-") || p.type === "dynamic-tool"))
    .map((p) => ({
      type: p.type,
      toolCallId: p.toolCallId,
      state: p.state,
      ...(p.input !== undefined ? { input: p.input } : {}),
      ...(p.output !== undefined ? { output: p.output } : {}),
      ...(p.errorText !== undefined ? { errorText: p.errorText } : {}),
      ...(p.approval !== undefined ? { approval: p.approval } : {}),
    }));
}

function summary(messages) {
  return messages.map((m) => {
    const tools = toolsOf(m);
    return { id: m.id, role: m.role, text: textOf(m), ...(tools.length ? { tools } : {}) };
  });
}

/** One message as a short string for the frame log: role:id:"text" plus its tool parts' states. */
function renderMessage(m) {
  if (!m || typeof m !== "object") return m;
  const tools = toolsOf(m).map((t) => `${t.type}:${t.state}${t.output !== undefined ? `=${JSON.stringify(t.output)}` : ""}`);
  const parts = Array.isArray(m.parts) ? m.parts.map((p) => p.type).join(",") : "?";
  return `${m.role}:${m.id}:${JSON.stringify(textOf(m))}${tools.length ? `[${tools.join(" ")}]` : ""}{${parts}}`;
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

async function getMessages(baseUrl, agent, name, query = "") {
  const auth = AUTH_TOKEN ? `${query ? "&" : "?"}token=${encodeURIComponent(AUTH_TOKEN)}` : "";
  const response = await fetch(`${baseUrl}/agents/${agent}/${name}/get-messages${query}${auth}`);
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
 * The server must open every (non-continuation) stream with `start{messageId}`
 * (docs/protocol.md#server--client-frames): the AI SDK adopts that id for the assistant message, which is how the client's message, replays and
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
    `the stream's first chunk is ${JSON.stringify(first)}, expected {"type":"start","messageId":"assistant_…"} (docs/protocol.md#server--client-frames); without it the AI SDK keeps a client-generated assistant id that matches neither the persisted row nor other tabs`,
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
  constructor(
    baseUrl,
    agentName,
    name,
    { label, reconnectDelayMs = 300, onToolCall, autoContinueAfterToolResult = true, onData, onMessages, query } = {},
  ) {
    // useAgent's `query`: extra URL parameters of the socket (and so of get-messages).
    this.query = AUTH_TOKEN && query !== null ? { token: AUTH_TOKEN, ...(query ?? {}) } : (query ?? undefined);
    // useAgentChat options: onToolCall (client tools), autoContinueAfterToolResult (default true)
    // and onData (passed to useChat, and called by the hook for observed data-* chunks).
    this.onToolCall = onToolCall;
    this.autoContinueAfterToolResult = autoContinueAfterToolResult;
    this.onData = onData;
    // Evidence: called with the chat's messages after every change of them (what a render shows).
    this.onMessages = onMessages;
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
      WebSocket: BrowserLikeWebSocket,
      // Reconnect quickly so a dropped socket comes back while the slow stream still runs.
      minReconnectionDelay: this.reconnectDelayMs,
      maxReconnectionDelay: this.reconnectDelayMs * 4,
      connectionTimeout: 4000,
      ...(this.query ? { query: this.query } : {}),
    });
    // Like useAgent's agent.getHttpUrl().
    agent.getHttpUrl = () => (agent._url || agent._pkurl || "").replace("ws://", "http://").replace("wss://", "https://");
    // Evidence: log every frame in both directions, per underlying connection.
    agent.addEventListener("open", () => {
      this.opens++;
      this.conn++;
    });
    agent.addEventListener("close", (event) => {
      this.closes++;
      // Evidence: who closed the socket, and how.
      frameLog.push({ t: Date.now() - T0, tab: this.label, conn: this.conn, dir: "close", frame: { close: event?.code, reason: event?.reason || undefined } });
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
    // Tool state of the hook (client tool results, onToolCall bookkeeping, tool continuations).
    this.processedToolCalls = new Set();
    this.clientToolResults = new Map();
    this.pendingOnToolCallIds = new Set();
    this.resumingToolContinuation = false;
    this.pendingToolContinuation = false;
    this.observedToolContinuationRequestId = null;
    this.continuationLaunchTimer = null;
    this.continuationGeneration = 0;
    this.isToolContinuation = false;
    this.unresolvedObservedRequestId = null;
    this.recoveringRequestId = null;
    this.onToolCallInvocations = [];
    this.peakMessageCount = initialMessages.length;
    this.peakAssistantCount = initialMessages.filter((m) => m.role === "assistant").length;

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
      ...(this.onData ? { onData: this.onData } : {}),
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

  /** What the hook returns as `messages`: the chat's messages with client tool results overlaid. */
  get messages() {
    const chatMessages = this.chat.messages;
    if (!this.clientToolResults || this.clientToolResults.size === 0) return chatMessages;
    return chatMessages.map((msg) => ({
      ...msg,
      parts: msg.parts.map((p) => {
        if (!("toolCallId" in p) || !("state" in p) || p.state !== "input-available" || !this.clientToolResults.has(p.toolCallId)) return p;
        return { ...p, state: "output-available", output: this.clientToolResults.get(p.toolCallId) };
      }),
    }));
  }

  get status() {
    return this.chat.status;
  }

  setMessages(update) {
    this.chat.messages = typeof update === "function" ? update(this.chat.messages) : update;
  }

  onChatChange(what) {
    if (what === "messages") {
      const msgs = this.chat.messages;
      // Evidence: every change of the message id list, with the time (frame log clock).
      const ids = msgs.map((m) => `${m.role[0]}:${m.id}`).join(" ");
      if (ids !== this.lastIdList) {
        this.lastIdList = ids;
        (this.idTimeline ??= []).push(`${Date.now() - T0}ms [${ids}]`);
      }
      this.peakMessageCount = Math.max(this.peakMessageCount ?? 0, msgs.length);
      this.peakAssistantCount = Math.max(this.peakAssistantCount ?? 0, msgs.filter((m) => m.role === "assistant").length);
      this.onMessages?.(msgs, this);
    }
    if (what === "status") {
      // The hook's effects on [status], after render, in declaration order:
      setTimeout(() => {
        if (this.disposed) return;
        const status = this.chat.status;
        // useEffect: a new submit clears the unresolved-observed / recovering request ids.
        if (status === "submitted") {
          this.unresolvedObservedRequestId = null;
          this.recoveringRequestId = null;
        }
        // useEffect: an errored pending tool continuation is reset, else (re)schedule its launch.
        if (status === "error" && this.pendingToolContinuation) this.resetToolContinuation();
        else this.scheduleToolContinuationLaunch();
        // useEffect: onToolCall for pending client tool calls.
        this.runToolCallEffect();
        // useEffect(() => reconnectProbeRunnerRef.current?.(), [isToolContinuation, status]).
        this.tryPendingReconnectProbe();
      }, 0);
      return;
    }
    if (what === "messages" && this.processedToolCalls) {
      setTimeout(() => {
        if (this.disposed) return;
        this.runToolCallEffect();
        this.pruneStaleToolState();
      }, 0);
    }
    if (what === "messages" && this.replayHydratedAssistantMessageIds?.size) {
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
    const canReconcileObservedContinuation = this.observedToolContinuationRequestId !== null;
    if (
      (status !== "ready" && status !== "error") ||
      (this.resumingToolContinuation && !canReconcileObservedContinuation) ||
      this.resumeOperation !== null
    )
      return;
    this.reconnectProbePending = false;
    this.resumeStream().catch(() => {});
  }

  handleAgentClose() {
    this.socketIsOpen = false;
    this.sawClose = true;
    this.fallbackAckedResumeRequestIds.clear();
    this.protectedStreamingAssistant = null;
    const unfinishedTurnId = this.transport.activeServerTurnId;
    if (unfinishedTurnId !== null) this.unresolvedObservedRequestId = unfinishedTurnId;
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
    this.clientToolResults = new Map();
    this.pendingOnToolCallIds = new Set();
    this.resetToolContinuation();
    this.processedToolCalls.clear();
    this.localResponseIds.clear();
    this.pendingReplayResumeRequestIds.clear();
    this.fallbackAckedResumeRequestIds.clear();
    this.replayHydratedAssistantMessageIds.clear();
    this.protectedStreamingAssistant = null;
    this.pendingBufferedSendIds.clear();
    this.transport.appliedChunks.clear();
  }

  /** The hook's onAgentMessage (recovery-hint and onTurnEnd bookkeeping left out). */
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
        this.setIsServerStreaming(false);
        this.unresolvedObservedRequestId = null;
        this.recoveringRequestId = null;
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
          this.setIsServerStreaming(result.isStreaming);
          this.unresolvedObservedRequestId = null;
          this.recoveringRequestId = null;
          if (this.observedToolContinuationRequestId !== null) this.resetToolContinuation();
        }
        break;
      }
      case MessageType.CF_AGENT_STREAM_PENDING:
        transport.handleStreamPending();
        break;
      case MessageType.CF_AGENT_STREAM_RESUMING: {
        if (this.unresolvedObservedRequestId !== data.id) this.unresolvedObservedRequestId = null;
        // (resume is on, so the hook's `!resume` branch does not apply.)
        const isEarlyToolContinuation = this.resumingToolContinuation && !transport.isAwaitingResume();
        if (!this.resumingToolContinuation) this.pendingReplayResumeRequestIds.add(data.id);
        if (transport.handleStreamResuming(data)) return;
        if (this.localRequestIds.has(data.id)) return;
        if (this.fallbackAckedResumeRequestIds.has(data.id)) return;
        if (isEarlyToolContinuation) {
          this.pendingToolContinuation = false;
          this.observedToolContinuationRequestId = data.id;
          if (this.continuationLaunchTimer) {
            clearTimeout(this.continuationLaunchTimer);
            this.continuationLaunchTimer = null;
          }
        }
        this.streamState = transition(this.streamState, {
          type: "resume-fallback",
          streamId: data.id,
          messageId: randomUUID(),
        }).state;
        transport.observeServerTurn(data.id);
        this.setIsServerStreaming(true);
        if (this.recoveringRequestId !== null && this.recoveringRequestId !== data.id) this.recoveringRequestId = null;
        this.fallbackAckedResumeRequestIds.add(data.id);
        this.agent.send(JSON.stringify({ type: MessageType.CF_AGENT_STREAM_RESUME_ACK, id: data.id }));
        break;
      }
      case MessageType.CF_AGENT_USE_CHAT_RESPONSE: {
        if ((data.done || data.error) && this.unresolvedObservedRequestId === data.id) this.unresolvedObservedRequestId = null;
        if (data.done && data.outcome === "recovering") this.recoveringRequestId = data.id;
        else if (this.recoveringRequestId !== null && this.recoveringRequestId !== data.id && !data.replay && data.outcome !== "skipped")
          this.recoveringRequestId = null;
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
                if (
                  data.replay &&
                  !data.continuation &&
                  !this.resumingToolContinuation &&
                  this.observedToolContinuationRequestId !== data.id
                ) {
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
              this.setIsServerStreaming(false);
            }
            transport.handleServerTurnCompleted(data.id);
            this.restoreProtectedStreamingAssistant(this.localResponseIds.get(data.id));
            this.localResponseIds.delete(data.id);
            this.localRequestIds.delete(data.id);
            this.fallbackAckedResumeRequestIds.delete(data.id);
            if (this.observedToolContinuationRequestId === data.id) this.resetToolContinuation();
          }
          return;
        }
        let chunkData;
        if (data.replay && this.streamState.status !== "observing" && !this.pendingReplayResumeRequestIds.has(data.id)) return;
        if (
          data.done &&
          !data.error &&
          !(this.streamState.status === "observing" && this.streamState.streamId === data.id) &&
          !this.pendingReplayResumeRequestIds.has(data.id) &&
          this.observedToolContinuationRequestId !== data.id
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
            this.setIsServerStreaming(result.isStreaming);
          }
          if (this.observedToolContinuationRequestId === data.id) this.resetToolContinuation();
          break;
        }
        const appliedReplay = transport.appliedChunks.isAppliedReplay(data.id, data);
        if (data.body?.trim()) {
          try {
            chunkData = JSON.parse(data.body);
            if (
              data.replay &&
              !data.continuation &&
              !this.resumingToolContinuation &&
              this.observedToolContinuationRequestId !== data.id &&
              typeof chunkData.messageId === "string" &&
              chunkData.type === "start"
            ) {
              this.pendingReplayResumeRequestIds.delete(data.id);
              this.resetMatchingHydratedAssistantForReplay(chunkData.messageId);
            }
            // The hook hands observed data-* chunks (transient ones included) to onData.
            if (typeof chunkData.type === "string" && chunkData.type.startsWith("data-") && !appliedReplay && this.onData) this.onData(chunkData);
          } catch (error) {
            this.errors.push(`unparsable chunk body: ${String(data.body).slice(0, 100)}`);
          }
        }
        if (data.done || data.replayComplete) this.pendingReplayResumeRequestIds.delete(data.id);
        if (data.done) {
          transport.handleServerTurnCompleted(data.id);
          this.fallbackAckedResumeRequestIds.delete(data.id);
        }
        const completedObservedToolContinuation = data.done && this.observedToolContinuationRequestId === data.id;
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
        this.setIsServerStreaming(result.isStreaming);
        if (completedObservedToolContinuation) this.resetToolContinuation();
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

  /** addToolOutput (the hook's): send `cf_agent_tool_result`, then the AI SDK's addToolResult. */
  addToolOutput(opts) {
    const toolName = opts.toolName ?? "";
    this.sendToolOutputToServer(opts.toolCallId, toolName, opts.output, opts.state, opts.errorText);
    this.addToolResultLocally(toolName, opts);
  }

  /**
   * addToolApprovalResponse (addToolApprovalResponseAndNotifyServer): resolve the toolCallId from
   * the part whose approval id matches, send `cf_agent_tool_approval`, then the AI SDK's own.
   */
  addToolApprovalResponse(args) {
    const { id: approvalId, approved } = args;
    let toolCallId;
    for (const msg of this.chat.messages) {
      for (const part of msg.parts) {
        if ("toolCallId" in part && "approval" in part && part.approval?.id === approvalId) {
          toolCallId = part.toolCallId;
          break;
        }
      }
      if (toolCallId) break;
    }
    if (toolCallId) this.sendToolApprovalToServer(toolCallId, approved);
    else this.errors.push(`addToolApprovalResponse: no toolCallId for approval id ${approvalId}; the server was not notified`);
    return this.chat.addToolApprovalResponse(args).catch((error) => this.errors.push(`addToolApprovalResponse: ${error.message}`));
  }

  // ---- the hook's tool plumbing ---------------------------------------------------------------

  addToolResultLocally(toolName, opts) {
    this.chat
      .addToolResult({
        tool: toolName,
        toolCallId: opts.toolCallId,
        output: opts.state === "output-error" ? opts.errorText ?? "Tool execution denied by user" : opts.output,
      })
      .catch((error) => this.errors.push(`addToolResult: ${error.message}`));
  }

  sendToolOutputToServer(toolCallId, toolName, output, state, errorText) {
    const shouldAutoContinue = state === "output-error" ? false : this.autoContinueAfterToolResult;
    this.agent.send(
      JSON.stringify({
        type: MessageType.CF_AGENT_TOOL_RESULT,
        toolCallId,
        toolName,
        output,
        ...(state ? { state } : {}),
        ...(errorText !== undefined ? { errorText } : {}),
        autoContinue: shouldAutoContinue,
        clientTools: undefined, // no `tools` option: no client tool schemas
      }),
    );
    if (state !== "output-error") this.clientToolResults = new Map(this.clientToolResults).set(toolCallId, output);
    if (shouldAutoContinue) this.startToolContinuation();
  }

  sendToolApprovalToServer(toolCallId, approved) {
    this.agent.send(
      JSON.stringify({
        type: MessageType.CF_AGENT_TOOL_APPROVAL,
        toolCallId,
        approved,
        autoContinue: this.autoContinueAfterToolResult,
      }),
    );
    if (this.autoContinueAfterToolResult) this.startToolContinuation();
  }

  setIsServerStreaming(value) {
    if (this.isServerStreaming === value) return;
    this.isServerStreaming = value;
    // The onToolCall effect depends on isServerStreaming.
    setTimeout(() => {
      if (!this.disposed) this.runToolCallEffect();
    }, 0);
  }

  setIsToolContinuation(value) {
    if (this.isToolContinuation === value) return;
    this.isToolContinuation = value;
    // useEffect(() => reconnectProbeRunnerRef.current?.(), [isToolContinuation, status]).
    setTimeout(() => this.tryPendingReconnectProbe(), 0);
  }

  resetToolContinuation() {
    this.continuationGeneration++;
    this.pendingToolContinuation = false;
    this.resumingToolContinuation = false;
    this.observedToolContinuationRequestId = null;
    if (this.continuationLaunchTimer) {
      clearTimeout(this.continuationLaunchTimer);
      this.continuationLaunchTimer = null;
    }
    this.setIsToolContinuation(false);
  }

  scheduleToolContinuationLaunch() {
    if (!this.pendingToolContinuation || this.chat.status !== "ready" || this.continuationLaunchTimer) return;
    const timer = setTimeout(() => {
      (async () => {
        while (this.resumeOperation) await this.resumeOperation.promise.catch(() => {});
        if (this.continuationLaunchTimer === timer) this.continuationLaunchTimer = null;
        if (!this.pendingToolContinuation || this.chat.status !== "ready") return;
        this.pendingToolContinuation = false;
        const myGeneration = this.continuationGeneration;
        this.transport.expectToolContinuation();
        this.toolContinuationLaunches = (this.toolContinuationLaunches ?? 0) + 1;
        await this.resumeStream()
          .catch((error) => this.errors.push(`tool continuation resume failed: ${error.message}`))
          .finally(() => {
            if (this.continuationGeneration !== myGeneration) return;
            this.resumingToolContinuation = false;
            this.setIsToolContinuation(false);
          });
      })();
    }, 0);
    this.continuationLaunchTimer = timer;
  }

  startToolContinuation() {
    if (!this.autoContinueAfterToolResult || this.resumingToolContinuation) return;
    ++this.continuationGeneration;
    this.resumingToolContinuation = true;
    this.pendingToolContinuation = true;
    this.setIsToolContinuation(true);
    this.scheduleToolContinuationLaunch();
  }

  /** The hook's onToolCall effect (deps: chatMessages, status, isServerStreaming, …). */
  runToolCallEffect() {
    const onToolCall = this.onToolCall;
    if (!onToolCall || this.disposed) return;
    const status = this.chat.status;
    if (
      status === "streaming" ||
      status === "submitted" ||
      this.isServerStreaming ||
      this.unresolvedObservedRequestId !== null ||
      this.recoveringRequestId !== null
    )
      return;
    const chatMessages = this.chat.messages;
    const lastMsg = chatMessages[chatMessages.length - 1];
    if (!lastMsg || lastMsg.role !== "assistant") return;
    const pendingToolCalls = lastMsg.parts.filter(
      (part) => isToolUIPart(part) && part.state === "input-available" && !this.processedToolCalls.has(part.toolCallId),
    );
    for (const part of pendingToolCalls) {
      const toolCallId = part.toolCallId;
      const toolName = getToolName(part);
      this.processedToolCalls.add(toolCallId);
      this.pendingOnToolCallIds = new Set(this.pendingOnToolCallIds).add(toolCallId);
      const addToolOutput = (opts) => {
        this.sendToolOutputToServer(opts.toolCallId, toolName, opts.output, opts.state, opts.errorText);
        this.addToolResultLocally(toolName, opts);
      };
      const finish = () => {
        if (!this.pendingOnToolCallIds.has(toolCallId)) return;
        const next = new Set(this.pendingOnToolCallIds);
        next.delete(toolCallId);
        this.pendingOnToolCallIds = next;
      };
      this.onToolCallInvocations.push({ t: Date.now() - T0, messageId: lastMsg.id, toolCallId, toolName, input: part.input });
      let result;
      try {
        result = onToolCall({ toolCall: { toolCallId, toolName, input: part.input }, addToolOutput });
      } catch (error) {
        finish();
        this.errors.push(`onToolCall threw: ${error.message}`);
        continue;
      }
      Promise.resolve(result)
        .catch((error) => this.errors.push(`onToolCall rejected: ${error.message}`))
        .finally(finish);
    }
  }

  /** The hook's effect dropping client tool results / processed ids of tool calls no longer shown. */
  pruneStaleToolState() {
    const current = new Set();
    for (const msg of this.chat.messages) for (const part of msg.parts) if ("toolCallId" in part && part.toolCallId) current.add(part.toolCallId);
    if ([...this.clientToolResults.keys()].some((id) => !current.has(id))) {
      const next = new Map();
      for (const [id, output] of this.clientToolResults) if (current.has(id)) next.set(id, output);
      this.clientToolResults = next;
    }
    for (const id of [...this.processedToolCalls]) if (!current.has(id)) this.processedToolCalls.delete(id);
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
      messages: this.chat ? summary(this.messages) : undefined,
      ...(this.onToolCallInvocations?.length ? { onToolCall: this.onToolCallInvocations } : {}),
      ...(this.toolContinuationLaunches ? { toolContinuationLaunches: this.toolContinuationLaunches } : {}),
      ...(this.peakMessageCount !== undefined ? { peakMessages: this.peakMessageCount, peakAssistants: this.peakAssistantCount } : {}),
      isServerStreaming: this.isServerStreaming,
      isToolContinuation: this.isToolContinuation,
      ...(this.idTimeline ? { idTimeline: this.idTimeline } : {}),
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

// ---------------------------------------------------------------------------------------------
// Tool scenarios (docs/agents.md#tools, docs/protocol.md#client--server-frames, docs/protocol.md#continuations)

const WEATHER_PARIS = { city: "Paris", temperature: 21, condition: "sunny" };
const LOCATION = { lat: 48.85, lon: 2.35 };
const PAYMENT_BOB = { amount: 42, recipient: "bob" };
const PAID_BOB = { ok: true, amount: 42, recipient: "bob" };

/** Key-order-insensitive JSON form, for comparing tool inputs / outputs. */
function canonical(value) {
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === "object") {
    return Object.fromEntries(
      Object.keys(value)
        .sort()
        .map((k) => [k, canonical(value[k])]),
    );
  }
  return value;
}

function deepEqual(a, b) {
  return JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
}

/** What two transcripts must agree on: ids, roles, text and the tool parts (type, call id, state, input, output). */
function comparable(messages) {
  return messages.map((m) => ({
    id: m.id,
    role: m.role,
    text: textOf(m),
    tools: toolsOf(m).map((t) => ({ type: t.type, toolCallId: t.toolCallId, state: t.state, input: t.input, output: t.output })),
  }));
}

function sameTranscript(x, y) {
  return deepEqual(comparable(x), comparable(y));
}

/**
 * One finished tool turn: [user, assistant] where the assistant holds exactly one `toolType` part in
 * `state` (with that input / output) before its text, and its only text is `text`, as its last part.
 */
function checkToolTurn(messages, { who, userText, toolType, state, input, output, text }) {
  check(messages.length === 2, `${who} holds ${messages.length} messages, expected exactly user + assistant`, {
    messages: summary(messages),
  });
  const [user, assistant] = messages;
  check(user.role === "user" && textOf(user) === userText, `${who}: the first message is not the user's ${JSON.stringify(userText)}`, {
    messages: summary(messages),
  });
  check(assistant.role === "assistant", `${who}: the second message is not an assistant`, { messages: summary(messages) });
  const parts = assistant.parts.map((p) => p.type);
  const toolParts = assistant.parts.filter((p) => p.type === toolType);
  check(toolParts.length === 1, `${who}: the assistant has ${toolParts.length} ${toolType} parts, expected 1`, { parts, tools: toolsOf(assistant) });
  const tool = toolParts[0];
  check(tool.state === state, `${who}: ${toolType} is ${JSON.stringify(tool.state)}, expected ${JSON.stringify(state)}`, { part: tool });
  if (input !== undefined) check(deepEqual(tool.input, input), `${who}: ${toolType} input is ${JSON.stringify(tool.input)}, expected ${JSON.stringify(input)}`);
  if (output !== undefined) {
    check(deepEqual(tool.output, output), `${who}: ${toolType} output is ${JSON.stringify(tool.output)}, expected ${JSON.stringify(output)}`, { part: tool });
  }
  const last = assistant.parts.at(-1);
  check(last?.type === "text" && last.text === text, `${who}: the assistant does not end with the text ${JSON.stringify(text)}`, {
    parts,
    lastPart: last,
  });
  check(textOf(assistant) === text, `${who}: the assistant's text is ${JSON.stringify(textOf(assistant))}, expected just ${JSON.stringify(text)}`, {
    parts,
  });
  check(assistant.parts.indexOf(tool) < assistant.parts.length - 1, `${who}: the text does not follow the tool part`, { parts });
  return { assistant, tool };
}

function logIndex(entry) {
  return frameLog.indexOf(entry);
}

/**
 * The wire of one tool round trip as `tab` saw it (docs/protocol.md#client--server-frames,
 * docs/protocol.md#continuations): the one tool frame it sent (with autoContinue), the server's `cf_agent_message_updated` for that tool call, the
 * continuation probe answered (`stream_pending` →) `stream_resuming`, one ACK, and the continuation's
 * frames: every one `continuation: true`, its `start` without `messageId`, one done frame without
 * `messageIds`, no error.
 */
function checkToolRoundTripWire(tab, { frameType, toolCallId, updatedState, updatedOutput }) {
  const sent = frameLog.filter((e) => e.tab === tab && e.dir === "out" && e.frame.type === frameType);
  check(sent.length === 1, `${tab} sent ${sent.length} ${frameType} frames, expected 1`, { sent: sent.map(renderFrame) });
  const toolFrame = sent[0];
  check(
    toolFrame.frame.toolCallId === toolCallId && toolFrame.frame.autoContinue === true,
    `${tab}'s ${frameType} frame is not {toolCallId: ${toolCallId}, autoContinue: true}`,
    { frame: toolFrame.frame },
  );
  const after = frameLog.filter((e) => e.tab === tab && logIndex(e) > logIndex(toolFrame));
  const updates = after.filter((e) => e.dir === "in" && e.frame.type === MessageType.CF_AGENT_MESSAGE_UPDATED);
  check(updates.length >= 1, `${tab} never received cf_agent_message_updated after its ${frameType} (docs/protocol.md#client--server-frames)`);
  const updatedPart = updates[0].frame.message?.parts?.find((p) => p.toolCallId === toolCallId);
  check(
    updatedPart?.state === updatedState && (updatedOutput === undefined || deepEqual(updatedPart.output, updatedOutput)),
    `the first cf_agent_message_updated after ${frameType} has the tool part ${JSON.stringify(updatedPart && { state: updatedPart.state, output: updatedPart.output })}, expected state ${JSON.stringify(updatedState)}${updatedOutput === undefined ? "" : ` with output ${JSON.stringify(updatedOutput)}`}`,
    { frame: renderFrame(updates[0]) },
  );
  const probes = after.filter((e) => e.dir === "out" && e.frame.type === MessageType.CF_AGENT_STREAM_RESUME_REQUEST);
  check(probes.length >= 1, `${tab} never probed for the tool continuation (expectToolContinuation + resumeStream)`);
  const probeId = probes[0].frame.probeId;
  const answers = after.filter(
    (e) =>
      e.dir === "in" &&
      e.frame.probeId === probeId &&
      [MessageType.CF_AGENT_STREAM_PENDING, MessageType.CF_AGENT_STREAM_RESUMING, MessageType.CF_AGENT_STREAM_RESUME_NONE].includes(e.frame.type),
  );
  const none = frameLog.find(
    (e) => e.tab === tab && e.dir === "in" && logIndex(e) > logIndex(probes[0]) && e.frame.type === MessageType.CF_AGENT_STREAM_RESUME_NONE,
  );
  check(
    !none || answers.some((e) => e.frame.type === MessageType.CF_AGENT_STREAM_RESUMING && logIndex(e) < logIndex(none)),
    `the continuation probe ${probeId} was answered with ${JSON.stringify(none?.frame)} before any stream_resuming: the client gives the continuation up (docs/protocol.md#continuations: a pending continuation is answered with stream_pending, then stream_resuming)`,
    { answers: answers.map(renderFrame) },
  );
  const acks = after.filter((e) => e.dir === "out" && e.frame.type === MessageType.CF_AGENT_STREAM_RESUME_ACK);
  check(acks.length === 1, `${tab} sent ${acks.length} resume ACKs after its ${frameType}, expected 1`, {
    acks: acks.map(renderFrame),
    answers: answers.map(renderFrame),
  });
  const continuationId = acks[0].frame.id;
  const resuming = after.find((e) => e.dir === "in" && e.frame.type === MessageType.CF_AGENT_STREAM_RESUMING && e.frame.id === continuationId);
  check(resuming && logIndex(resuming) < logIndex(acks[0]), `${tab} ACKed ${continuationId} without a stream_resuming for it`);
  const frames = responseFrames(tab, continuationId);
  const flagless = frames.filter((e) => e.frame.continuation !== true);
  check(flagless.length === 0, `${flagless.length} frames of the continuation ${continuationId} lack continuation:true (docs/protocol.md#continuations)`, {
    frames: flagless.slice(0, 5).map(renderFrame),
  });
  const chunks = frames.map((e) => parsedChunk(e.frame)).filter(Boolean);
  const starts = chunks.filter((c) => c.type === "start");
  check(starts.length >= 1, `the continuation ${continuationId} has no start chunk`, { chunks: chunks.map((c) => c.type) });
  check(
    starts.every((c) => c.messageId === undefined),
    `the continuation's start chunk carries messageId ${JSON.stringify(starts.find((c) => c.messageId !== undefined)?.messageId)} (docs/protocol.md#continuations: stripped)`,
  );
  const errors = frames.filter((e) => e.frame.error);
  check(errors.length === 0, `the continuation ${continuationId} errored`, { frames: errors.map(renderFrame) });
  const dones = frames.filter((e) => e.frame.done === true);
  check(dones.length === 1, `the continuation ${continuationId} has ${dones.length} done frames, expected 1`, { frames: dones.map(renderFrame) });
  check(
    !("messageIds" in dones[0].frame),
    `the continuation's done frame carries messageIds ${JSON.stringify(dones[0].frame.messageIds)} (docs/protocol.md#continuations: none)`,
    { frame: dones[0].frame },
  );
  const strays = after.filter(
    (e) => e.dir === "in" && e.frame.type === MessageType.CF_AGENT_USE_CHAT_RESPONSE && e.frame.id !== continuationId,
  );
  check(strays.length === 0, `${strays.length} chat response frames of another request arrived after the ${frameType}`, {
    frames: strays.slice(0, 5).map(renderFrame),
  });
  const finalMessages = after.filter((e) => e.dir === "in" && e.frame.type === MessageType.CF_AGENT_CHAT_MESSAGES);
  return {
    continuationId,
    probeAnswers: answers.map((e) => e.frame.type),
    messageUpdated: updates.map((e) => renderFrame(e)),
    continuationChunks: chunks.map((c) => c.type),
    chatMessagesToOriginator: finalMessages.length,
  };
}

/** The app's onToolCall: answers the client tool getLocation, nothing else. */
function answerGetLocation({ toolCall, addToolOutput }) {
  if (toolCall.toolName === "getLocation") addToolOutput({ toolCallId: toolCall.toolCallId, output: LOCATION });
}

/** Waits until `tab` finished a tool continuation: its done frame arrived and the hook settled. */
async function waitForContinuation(tab, what, timeoutMs = 15_000) {
  await until(
    () =>
      noUnexpectedClose(tab) &&
      frameLog.some(
        (e) =>
          e.tab === tab.label &&
          e.dir === "in" &&
          e.frame.type === MessageType.CF_AGENT_USE_CHAT_RESPONSE &&
          e.frame.continuation === true &&
          e.frame.done === true,
      ) &&
      (tab.toolContinuationLaunches ?? 0) >= 1 &&
      !tab.resumingToolContinuation &&
      !tab.isToolContinuation &&
      tab.resumeOperation === null &&
      tab.status === "ready",
    timeoutMs,
    what,
  ).catch((error) => {
    error.details ??= { tab: tab.snapshot(), resumingToolContinuation: tab.resumingToolContinuation };
    throw error;
  });
  // Let late AI SDK writes and the server's final broadcasts land before judging the final state.
  await sleep(400);
}

/** Tool scenarios never drop a socket: a close is the server's doing, and fails the scenario. */
function noUnexpectedClose(tab) {
  const close = frameLog.find((e) => e.tab === tab.label && e.dir === "close");
  check(
    !close,
    `${tab.label}'s socket was closed by the server mid-scenario (code ${close?.frame.close}${close?.frame.reason ? `, ${JSON.stringify(close.frame.reason)}` : ""}) at ${close?.t}ms; the client then lost the rest of the continuation`,
    { close: close && renderFrame(close), tab: tab.snapshot() },
  );
  return true;
}

/** The first turn's chunks, as `tab` received them. */
function chunksOf(tab, requestId) {
  return responseFrames(tab, requestId)
    .map((e) => parsedChunk(e.frame))
    .filter(Boolean);
}

/**
 * Tab `a` sends `client-tool:`; the turn ends with getLocation awaiting the client; the hook's
 * onToolCall effect answers it through addToolOutput; the continuation runs. Returns what the
 * checks need.
 */
async function clientToolRoundTrip(a, observed) {
  await withTimeout(a.send("client-tool:"), 10_000, "sendMessage(client-tool:) to finish");
  const req = sentRequests(a.label)[0];
  const serverId = requireServerStart(a.label, req.id);
  const first = chunksOf(a.label, req.id);
  observed.firstTurnChunks = first.map((c) => c.type);
  const call = first.find((c) => c.type === "tool-input-available");
  check(call?.toolName === "getLocation", "the first turn did not call the client tool getLocation", { chunks: observed.firstTurnChunks });
  check(!first.some((c) => c.type === "tool-output-available"), "the first turn produced an output for the client tool getLocation");
  await until(() => a.onToolCallInvocations.length > 0, 3000, "onToolCall to run for getLocation").catch((error) => {
    throw Object.assign(error, { details: { tab: a.snapshot() } });
  });
  await waitForContinuation(a, "the tool continuation after addToolOutput to finish");
  check(a.onToolCallInvocations.length === 1, `onToolCall ran ${a.onToolCallInvocations.length} times, expected once`, {
    calls: a.onToolCallInvocations,
  });
  const invocation = a.onToolCallInvocations[0];
  check(
    invocation.toolName === "getLocation" && invocation.toolCallId === call.toolCallId && invocation.messageId === serverId,
    "onToolCall ran for something other than the turn's getLocation call",
    { invocation, call, serverId },
  );
  return { req, serverId, toolCallId: call.toolCallId };
}

const CLIENT_TOOL_TEXT = `tool result: ${JSON.stringify(LOCATION)}`;

/** approve:bob, answered through addToolApprovalResponse({id: approvalId, approved}). */
async function approvalScenario({ urls, agent, name }, observed, approved) {
  const a = await mounted(urls[0], agent, name, { onToolCall: answerGetLocation });
  await withTimeout(a.send("approve:bob"), 10_000, "sendMessage(approve:bob) to finish");
  const req = sentRequests(a.label)[0];
  const serverId = requireServerStart(a.label, req.id);
  const first = chunksOf(a.label, req.id);
  observed.firstTurnChunks = first.map((c) => c.type);
  const request = first.find((c) => c.type === "tool-approval-request");
  check(request && typeof request.approvalId === "string", "the first turn has no tool-approval-request chunk", { chunks: observed.firstTurnChunks });
  const part = await until(
    () => a.messages.at(-1)?.parts?.find((p) => p.type === "tool-processPayment" && p.state === "approval-requested"),
    3000,
    "the processPayment part to await approval (approval-requested)",
  ).catch((error) => {
    throw Object.assign(error, { details: { tab: a.snapshot() } });
  });
  check(part.toolCallId === request.toolCallId && part.approval?.id === request.approvalId, "the approval-requested part does not match the tool-approval-request chunk", {
    part,
    request,
  });
  check(deepEqual(part.input, PAYMENT_BOB), `processPayment input is ${JSON.stringify(part.input)}, expected ${JSON.stringify(PAYMENT_BOB)}`);
  const beforeApproval = await getMessages(urls[0], agent, name);
  observed.getBeforeApproval = summary(beforeApproval);
  a.addToolApprovalResponse({ id: part.approval.id, approved });
  await waitForContinuation(a, `the tool continuation after addToolApprovalResponse(approved: ${approved}) to finish`);
  observed.tab = a.snapshot();
  observed.wire = checkToolRoundTripWire(a.label, {
    frameType: MessageType.CF_AGENT_TOOL_APPROVAL,
    toolCallId: part.toolCallId,
    updatedState: approved ? "approval-responded" : "output-denied",
  });
  check(a.status === "ready" && !a.chat.error, `status is ${a.status}`, { error: a.chat.error?.message, errors: a.errors });
  check(a.onToolCallInvocations.length === 0, "onToolCall ran for the server tool processPayment", { calls: a.onToolCallInvocations });
  const expected = {
    userText: "approve:bob",
    toolType: "tool-processPayment",
    input: PAYMENT_BOB,
    ...(approved
      ? { state: "output-available", output: PAID_BOB, text: `tool result: ${JSON.stringify(PAID_BOB)}` }
      : { state: "output-denied", text: "tool denied" }),
  };
  if (approved) {
    const contChunks = chunksOf(a.label, observed.wire.continuationId);
    const out = contChunks.find((c) => c.type === "tool-output-available" && c.toolCallId === part.toolCallId);
    check(out && deepEqual(out.output, PAID_BOB), "the continuation did not carry tool-output-available for the approved call", {
      chunks: observed.wire.continuationChunks,
    });
  }
  checkToolTurn(a.messages, { who: "the client", ...expected });
  check(a.messages[1].id === serverId, `the assistant id ${a.messages[1].id} is not the first turn's ${serverId}: the continuation did not land in the same message`);
  const history = await settledGet(urls[0], agent, name, (h) => h.length === 2 && textOf(h[1]) === expected.text, "the finished approval turn");
  observed.get = summary(history);
  checkToolTurn(history, { who: "get-messages", ...expected });
  check(sameTranscript(history, a.messages), "get-messages differs from the client state", { client: summary(a.messages), get: summary(history) });
}

// ---------------------------------------------------------------------------------------------
// Preliminary tool results, data parts, messageConcurrency (docs/agents.md#server-tools, docs/agents.md#data-parts, docs/agents.md#message_concurrency)

/** Fails if `predicate` stops holding at any point during the next `ms` (a late regression). */
async function holds(predicate, ms, what) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    check(predicate(), `${what} stopped holding within ${ms} ms`);
    await sleep(10);
  }
}

/**
 * A `Tab` option that records every distinct `view(messages)` a tab showed (its renders), with
 * the time, the AI SDK status and whether the hook was observing a server stream.
 */
function viewRecorder(view) {
  const log = [];
  let last;
  const onMessages = (messages, tab) => {
    const value = view(messages);
    const key = JSON.stringify(value);
    if (key === last) return;
    last = key;
    // `seq`: how many frames were logged when this render happened (orders renders and frames).
    log.push({ t: Date.now() - T0, seq: frameLog.length, status: tab.chat?.status, serverStreaming: tab.isServerStreaming, view: value });
  };
  return { log, onMessages };
}

/** Whether `tab` is done with all work: ready, no observed stream, no resume in flight. */
function idle(tab) {
  return tab.status === "ready" && !tab.isServerStreaming && tab.resumeOperation === null && !tab.chat.error;
}

/** No error reached `tab`: no chat error, no hook/driver error, never status "error", no error frame. */
function noClientError(tab) {
  const errorFrames = frameLog.filter((e) => e.tab === tab.label && e.dir === "in" && e.frame.error);
  check(errorFrames.length === 0, `${tab.label} received ${errorFrames.length} error frames`, { frames: errorFrames.map(renderFrame) });
  check(!tab.chat.error, `${tab.label}'s chat is in error: ${tab.chat.error?.message}`);
  check(tab.errors.length === 0, `${tab.label} recorded errors`, { errors: tab.errors });
  const hist = tab.chat.memoryState.statusHistory;
  check(!hist.includes("error"), `${tab.label}'s status went to "error"`, { hist });
}

const LIVE_PRELIMINARY = ["finding weather stations", "reading 3 stations", "averaging"].map((status, i) => ({ city: "Paris", status, step: i + 1 }));
const LIVE_FINAL = { city: "Paris", status: "done", temperature: 21, condition: "sunny" };

/** The getWeather part of the last assistant (state, preliminary, output) and that message's text. */
function liveToolView(messages) {
  const assistant = assistantOf(messages).at(-1);
  const part = assistant?.parts.find((p) => p.type === "tool-getWeather");
  return {
    id: assistant?.id,
    tool: part ? { state: part.state, preliminary: part.preliminary, output: part.output } : null,
    text: textOf(assistant),
  };
}

/**
 * Whether a tool view is the finished getWeather: output-available, the final output, and no
 * preliminary flag — unless `keptFlag`: the hook's observer accumulator (agents applyChunkToParts)
 * only sets `preliminary` when a chunk carries it, and the final chunk has none (the AI SDK wire),
 * so a tab that watched the stream live keeps `preliminary: true` on the final output.
 */
function isFinalLiveTool(tool, { keptFlag = false } = {}) {
  return tool?.state === "output-available" && (keptFlag || tool.preliminary !== true) && deepEqual(tool.output, LIVE_FINAL);
}

/**
 * What one tab showed of the streaming tool (views recorded by `viewRecorder(liveToolView)`): every
 * preliminary value, in order, flagged preliminary while the turn still ran (`during(entry)`), never
 * a preliminary value without the flag; the final output at the end.
 */
function checkLiveToolViews(who, log, during, { requireAll = true } = {}) {
  const shown = log.filter((e) => e.view.tool?.state === "output-available");
  const unflagged = shown.filter((e) => LIVE_PRELIMINARY.some((p) => deepEqual(p, e.view.tool.output)) && e.view.tool.preliminary !== true);
  check(unflagged.length === 0, `${who} showed a preliminary result without preliminary: true`, { views: unflagged });
  const preliminary = shown.filter((e) => e.view.tool.preliminary === true && during(e));
  const seen = [];
  for (const e of preliminary) {
    const i = LIVE_PRELIMINARY.findIndex((p) => deepEqual(p, e.view.tool.output));
    if (i >= 0 && !seen.includes(i)) seen.push(i);
  }
  const inOrder = seen.every((v, k) => k === 0 || v > seen[k - 1]);
  check(
    seen.length > 0 && inOrder && (!requireAll || seen.length === LIVE_PRELIMINARY.length),
    `${who} did not show the preliminary results ${requireAll ? "all " : ""}in order while the turn ran (seen: ${JSON.stringify(seen)})`,
    { views: log },
  );
  const earlyText = preliminary.filter((e) => e.view.text && !deepEqual(e.view.tool.output, LIVE_FINAL));
  check(earlyText.length === 0, `${who} showed the model's answer before the tool's final output`, { views: earlyText });
  return { preliminaryShown: seen.length, firstPreliminaryAt: preliminary[0]?.t };
}

/** The finished turn as a tab or get-messages holds it: [user, assistant] with the final tool output. */
function checkLiveTranscript(who, messages, { keptFlag = false } = {}) {
  check(messages.length === 2 && messages[0].role === "user" && textOf(messages[0]) === "tool:Paris", `${who} does not hold the user's tool:Paris + one assistant`, {
    messages: summary(messages),
  });
  const view = liveToolView(messages);
  check(
    isFinalLiveTool(view.tool, { keptFlag }),
    `${who}: the getWeather part is ${JSON.stringify(view.tool)}, expected output-available with the final output${keptFlag ? "" : " and no preliminary flag"}`,
  );
  const prefix = "tool result: ";
  check(view.text.startsWith(prefix) && deepEqual(JSON.parse(view.text.slice(prefix.length)), LIVE_FINAL), `${who}: the answer is ${JSON.stringify(view.text)}, expected the model's reading of the final output`);
  check(messages[1].parts.filter((p) => p.type === "tool-getWeather").length === 1, `${who}: more than one getWeather part`, { parts: messages[1].parts.map((p) => p.type) });
}

/** The data parts (type, id, data) and text parts of a message, in order: what data-parts compares. */
function dataPartsOf(message) {
  return (message?.parts ?? [])
    .filter((p) => p.type === "text" || p.type.startsWith("data-"))
    .map((p) => (p.type === "text" ? { type: "text", text: p.text } : { type: p.type, ...(p.id !== undefined ? { id: p.id } : {}), data: p.data }));
}

const DATA_FINAL = [
  { type: "data-progress", id: "job", data: { done: 3, total: 3 } },
  { type: "data-note", id: "job", data: { text: "same id, another type" } },
  { type: "text", text: "Report done." },
  { type: "data-source", data: { title: "A" } },
  { type: "data-source", data: { title: "B" } },
];
/** The data chunks of the reply, in stream order: what `onData` must receive. */
const DATA_CHUNKS = [
  { type: "data-status", data: { text: "working" }, transient: true },
  { type: "data-progress", id: "job", data: { done: 1, total: 3 } },
  { type: "data-progress", id: "job", data: { done: 2, total: 3 } },
  { type: "data-note", id: "job", data: { text: "same id, another type" } },
  { type: "data-progress", id: "job", data: { done: 3, total: 3 } },
  { type: "data-status", data: { text: "finishing" }, transient: true },
  { type: "data-source", data: { title: "A" } },
  { type: "data-source", data: { title: "B" } },
];

function dataView(messages) {
  const assistant = assistantOf(messages).at(-1);
  return { id: assistant?.id, parts: dataPartsOf(assistant), transientParts: (assistant?.parts ?? []).filter((p) => p.type === "data-status").length };
}

/**
 * What one tab showed of the data reply, render by render: the progress part replaced in place
 * (one part, in first position, data 1 → 2 → 3), never a transient part. Returns the progress seen.
 */
function checkDataViews(who, log) {
  const progress = [];
  for (const e of log) {
    check(e.view.transientParts === 0, `${who} showed a transient data-status part in the message (transient parts are onData-only)`, { view: e.view });
    const parts = e.view.parts.filter((p) => p.type === "data-progress");
    check(parts.length <= 1, `${who} showed ${parts.length} data-progress parts: a chunk with the same type and id was appended instead of replacing the part`, { view: e.view });
    if (parts.length === 1) {
      check(e.view.parts[0].type === "data-progress", `${who} moved the data-progress part away from its first position`, { view: e.view });
      const done = parts[0].data.done;
      if (progress.at(-1) !== done) progress.push(done);
    }
  }
  check(deepEqual(progress, [1, 2, 3]), `${who} showed data-progress ${JSON.stringify(progress)}, expected it replaced in place 1 → 2 → 3`, { views: log });
  return progress;
}

function checkDataChunksReceived(who, received) {
  check(deepEqual(received, DATA_CHUNKS), `${who}'s onData received ${received.length} data chunks, expected every data chunk (transient ones included) in order`, {
    received,
    expected: DATA_CHUNKS,
  });
}

// --- messageConcurrency ---

/** The request frames `tab` sent, once it has sent `count` of them. */
async function requestsSent(tab, count) {
  return until(() => {
    const sent = sentRequests(tab.label);
    return sent.length >= count ? sent : null;
  }, 5000, `${tab.label} to send request ${count}`);
}

function doneFrame(tab, requestId) {
  return responseFrames(tab.label, requestId).find((e) => e.frame.done === true);
}

/** The user message a request added: the last message of its body. */
function userOf(request) {
  return request.body.messages.at(-1);
}

/** ids, roles and texts: what the concurrency scenarios compare. */
function shape(messages) {
  return messages.map((m) => ({ id: m.id, role: m.role, text: textOf(m) }));
}

/**
 * `latest`, `debounce`: a slow reply streams; the tab sends "two", then "three". The running turn
 * is not aborted (docs/agents.md#message_concurrency); "two" is superseded by "three" (skipped: a bare done frame, no
 * chunks, its user message kept); the last turn answers.
 */
async function supersedeScenario({ urls, agent, name }, observed, strategy) {
  const ids = viewRecorder((messages) => shape(messages).map((m) => `${m.role[0]}:${m.id}`).join(" "));
  const a = await mounted(urls[0], agent, name, { onMessages: ids.onMessages });
  const p1 = a.send("slow one").catch((e) => a.errors.push(`send 1: ${e.message}`));
  const r1 = await waitForDeltas(a, 3);
  const p2 = a.send("two").catch((e) => a.errors.push(`send 2: ${e.message}`));
  const r2 = (await requestsSent(a, 2))[1];
  const p3 = a.send("three").catch((e) => a.errors.push(`send 3: ${e.message}`));
  const r3 = (await requestsSent(a, 3))[2];
  const answer = "echo: three";
  observed.strategy = strategy;
  observed.sentAfterDeltas = countDeltas(a.label, r1.id);
  await withTimeout(Promise.all([p1, p2, p3]), 20_000, "the three sendMessage calls to settle");
  await until(() => idle(a) && doneFrame(a, r3.id) && textOf(assistantOf(a.messages).at(-1)) === answer, 5000, `the client to settle on ${JSON.stringify(answer)}`).catch(
    (error) => {
      throw Object.assign(error, { details: { tab: a.snapshot() } });
    },
  );
  observed.tab = a.snapshot();
  observed.idTimeline = ids.log.map((e) => `${e.t}ms ${e.view}`);
  noClientError(a);
  const { a1, a3 } = checkSupersededWire(a, observed, { r1, r2, r3, firstText: SLOW_TEXT });
  const expected = [
    { id: userOf(r1).id, role: "user", text: "slow one" },
    { id: a1, role: "assistant", text: SLOW_TEXT },
    { id: userOf(r2).id, role: "user", text: "two" },
    { id: userOf(r3).id, role: "user", text: "three" },
    { id: a3, role: "assistant", text: answer },
  ];
  const history = await settledGet(urls[0], agent, name, (h) => h.length === expected.length && textOf(h.at(-1)) === answer, "the finished transcript");
  observed.get = shape(history);
  check(deepEqual(shape(history), expected), "get-messages does not hold the expected transcript", { get: shape(history), expected });
  check(deepEqual(shape(a.messages), expected), "the client's transcript differs from the expected one", { client: shape(a.messages), expected });
  await holds(() => deepEqual(shape(a.messages), expected) && idle(a), 300, "the client's final transcript");
}

/** Turn 1 ran to completion with `firstText`, turn 2 was skipped (bare done, no chunks), turn 3 answered. */
function checkSupersededWire(a, observed, { r1, r2, r3, firstText }) {
  const skipped = doneFrame(a, r2.id);
  observed.skippedDone = skipped?.frame;
  check(skipped, "the superseded request never got a done frame");
  check(chunksOf(a.label, r2.id).length === 0, "the superseded request streamed chunks", { chunks: chunksOf(a.label, r2.id) });
  if (skipped.frame.outcome !== "skipped") observed.deviation = `the superseded request's done frame has outcome ${JSON.stringify(skipped.frame.outcome)}`;
  const a1 = requireServerStart(a.label, r1.id);
  const a3 = requireServerStart(a.label, r3.id);
  const wire1 = chunksOf(a.label, r1.id).filter((c) => c.type === "text-delta").map((c) => c.delta).join("");
  check(wire1 === firstText, "the first turn did not complete (messageConcurrency never aborts the running turn)", { wire1 });
  check(doneFrame(a, r1.id)?.frame.outcome === undefined, `the first turn ended with outcome ${JSON.stringify(doneFrame(a, r1.id)?.frame.outcome)}`);
  return { a1, a3 };
}

/**
 * Calls `then()` in a microtask right after `tab` sent its next chat request frame: before any
 * frame can arrive (frames are macrotasks), i.e. before the client shows the reply.
 */
function afterNextRequest(tab, then) {
  const send = tab.agent.send;
  tab.agent.send = (data) => {
    const result = send(data);
    if (JSON.parse(data).type === MessageType.CF_AGENT_USE_CHAT_REQUEST) {
      tab.agent.send = send;
      queueMicrotask(then);
    }
    return result;
  };
}

/**
 * `merge`: the user types "two" and "three" right after "slow first", before its reply shows. Both
 * overlap turn 1; "two" is superseded; the two queued user messages become one (the texts joined
 * by a blank line, the id of the last) that the last turn answers. The reference persists the
 * merged transcript with no connection excluded (AIChatAgent._mergeQueuedUserMessages), so the
 * sender's tab shows it too: the client must end with get-messages' transcript.
 *
 * (Sent while the reply streams, the AI SDK puts its in-flight assistant message into the request
 * body; the server stores it between the queued user messages, and neither durachat nor the
 * reference merges then: the run of user messages starts with that assistant.)
 */
async function mergeScenario({ urls, agent, name }, observed) {
  const ids = viewRecorder((messages) => shape(messages).map((m) => `${m.role[0]}:${m.id}`).join(" "));
  const a = await mounted(urls[0], agent, name, { onMessages: ids.onMessages });
  const later = {};
  afterNextRequest(a, () => {
    later.p2 = a.send("two").catch((e) => a.errors.push(`send 2: ${e.message}`));
    later.p3 = a.send("three").catch((e) => a.errors.push(`send 3: ${e.message}`));
  });
  // A slow first reply: "two" and "three" reach the server while its turn surely still runs.
  const p1 = a.send("slow first").catch((e) => a.errors.push(`send 1: ${e.message}`));
  const [r1, r2, r3] = await requestsSent(a, 3);
  observed.bodies = [r1, r2, r3].map((r) => r.body.messages.map((m) => `${m.role[0]}:${m.id}`).join(" "));
  check(
    [r1, r2, r3].every((r, i) => r.body.messages.length === i + 1 && r.body.messages.every((m) => m.role === "user")),
    "the three requests were not sent before the first reply showed (each body should hold only the user messages so far)",
    { bodies: observed.bodies },
  );
  const answer = "echo: two\n\nthree";
  await withTimeout(Promise.all([p1, later.p2, later.p3]), 20_000, "the three sendMessage calls to settle");
  await until(() => idle(a) && doneFrame(a, r3.id), 5000, "the client to settle").catch((error) => {
    throw Object.assign(error, { details: { tab: a.snapshot() } });
  });
  observed.tab = a.snapshot();
  observed.idTimeline = ids.log.map((e) => `${e.t}ms ${e.view}`);
  noClientError(a);
  const { a1, a3 } = checkSupersededWire(a, observed, { r1, r2, r3, firstText: SLOW_TEXT });
  check(textOf(a.messages.find((m) => m.id === a3)) === answer, `the last turn answered ${JSON.stringify(textOf(a.messages.find((m) => m.id === a3)))}, expected ${JSON.stringify(answer)} (the merged message)`);
  const history = await settledGet(urls[0], agent, name, (h) => h.length === 4 && h.some((m) => m.id === a3 && textOf(m) === answer), "the merged transcript");
  observed.get = shape(history);
  const u1 = userOf(r1);
  const u3 = userOf(r3);
  const expected = [
    { id: u1.id, role: "user", text: "slow first" },
    { id: a1, role: "assistant", text: SLOW_TEXT },
    { id: u3.id, role: "user", text: "two\n\nthree" },
    { id: a3, role: "assistant", text: answer },
  ];
  const byId = (list) => [...list].sort((x, y) => (x.id < y.id ? -1 : 1));
  check(deepEqual(byId(shape(history)), byId(expected)), "get-messages does not hold the first turn, the merged user message and its answer", { get: shape(history), expected });
  check(
    deepEqual(shape(a.messages), shape(history)),
    "the client does not show get-messages' transcript (the reference persists the merged messages with no connection excluded, so the sender's tab receives them too)",
    { client: shape(a.messages), get: shape(history) },
  );
  await holds(() => deepEqual(shape(a.messages), shape(history)) && idle(a), 300, "the client's final transcript");
}

/**
 * `drop`: a slow reply streams; the tab sends "too soon". The server refuses it before storing it:
 * the sender gets the rollback `cf_agent_chat_messages` (the server transcript with the reply in
 * progress) and a bare done frame. The client drops the message and the first reply completes.
 */
async function dropScenario({ urls, agent, name }, observed) {
  const ids = viewRecorder((messages) => shape(messages).map((m) => `${m.role[0]}:${m.id}`).join(" "));
  const a = await mounted(urls[0], agent, name, { onMessages: ids.onMessages });
  const p1 = a.send("slow one").catch((e) => a.errors.push(`send 1: ${e.message}`));
  const r1 = await waitForDeltas(a, 3);
  const p2 = a.send("too soon").catch((e) => a.errors.push(`send 2: ${e.message}`));
  const r2 = (await requestsSent(a, 2))[1];
  const u1 = userOf(r1);
  const u2 = userOf(r2);
  await withTimeout(p2, 5000, "the dropped sendMessage to settle");
  const sentAt = frameLog.findIndex((e) => e.tab === a.label && e.dir === "out" && e.frame.id === r2.id);
  const done = doneFrame(a, r2.id);
  check(done, "the dropped request never got a done frame");
  const rollback = frameLog.find(
    (e, i) => i > sentAt && i < logIndex(done) && e.tab === a.label && e.dir === "in" && e.frame.type === MessageType.CF_AGENT_CHAT_MESSAGES,
  );
  observed.rollback = rollback && renderFrame(rollback);
  observed.droppedDone = done.frame;
  check(rollback, "the sender got no rollback cf_agent_chat_messages before the dropped request's done frame (docs/agents.md#message_concurrency)");
  check(!rollback.frame.messages.some((m) => m.id === u2.id), "the rollback transcript holds the dropped message");
  check(rollback.frame.messages[0]?.id === u1.id, "the rollback transcript does not start with the first user message", { messages: shape(rollback.frame.messages) });
  check(chunksOf(a.label, r2.id).length === 0, "the dropped request streamed chunks");
  if (done.frame.outcome !== "skipped") observed.deviation = `the dropped request's done frame has outcome ${JSON.stringify(done.frame.outcome)}`;
  // Right after the rollback, while the first reply still streams, the message is gone.
  const duringStream = !doneFrame(a, r1.id);
  observed.rollbackWhileStreaming = duringStream;
  check(!a.chat.messages.some((m) => m.id === u2.id), "after the rollback the client still shows the dropped message", { client: shape(a.chat.messages) });
  await withTimeout(p1, 15_000, "the first sendMessage to settle");
  await until(() => idle(a) && textOf(assistantOf(a.messages).at(-1)) === SLOW_TEXT, 5000, "the first reply to complete in the client").catch((error) => {
    throw Object.assign(error, { details: { tab: a.snapshot() } });
  });
  observed.tab = a.snapshot();
  observed.idTimeline = ids.log.map((e) => `${e.t}ms ${e.view}`);
  noClientError(a);
  const a1 = requireServerStart(a.label, r1.id);
  const expected = [
    { id: u1.id, role: "user", text: "slow one" },
    { id: a1, role: "assistant", text: SLOW_TEXT },
  ];
  check(deepEqual(shape(a.messages), expected), "the client does not end with just the first turn", { client: shape(a.messages), expected });
  check(!ids.log.some((e) => e.seq > logIndex(rollback) && e.view.includes(u2.id)), "the dropped message came back after the rollback", { idTimeline: observed.idTimeline });
  const history = await settledGet(urls[0], agent, name, (h) => h.length === 2 && textOf(h[1]) === SLOW_TEXT, "the first turn alone");
  observed.get = shape(history);
  check(deepEqual(shape(history), expected), "get-messages does not hold just the first turn", { get: shape(history), expected });
  await holds(() => deepEqual(shape(a.messages), expected) && idle(a), 300, "the client's final transcript");
}

/**
 * A server tool that is an async generator (compat-live-tool-agent's getWeather): each yield is a
 * `tool-output-available` with `preliminary: true`, the last one is then final. Three tabs: the
 * sender (AbstractChat's own stream), an observer connected before the send (the hook's observer
 * accumulator), and a tab that loads mid-stream (get-messages + resume replay); then a fresh
 * client after the turn (get-messages only).
 */
async function preliminaryScenario({ urls, agent, name }, observed) {
  const viewsA = viewRecorder(liveToolView);
  const viewsB = viewRecorder(liveToolView);
  const viewsC = viewRecorder(liveToolView);
  const b = await mounted(urls.at(-1), agent, name, { label: "observer", onMessages: viewsB.onMessages });
  const a = await mounted(urls[0], agent, name, { label: "sender", onMessages: viewsA.onMessages });
  const sending = a.send("tool:Paris").catch((e) => a.errors.push(`send: ${e.message}`));
  await until(() => viewsA.log.some((e) => e.view.tool?.preliminary === true), 8000, "the sender to show a preliminary tool result").catch((error) => {
    throw Object.assign(error, { details: { views: viewsA.log } });
  });
  // A reload while the tool still streams: a new client, hydrated from get-messages, resuming.
  const c = newTab(urls.at(-1), agent, name, { label: "reload", onMessages: viewsC.onMessages });
  c.connect();
  await c.waitOpen();
  await c.mount();
  await withTimeout(sending, 15_000, "sendMessage(tool:Paris) to finish");
  const settled = (tab, views, keptFlag = false) =>
    idle(tab) && isFinalLiveTool(views.log.at(-1)?.view.tool, { keptFlag }) && views.log.at(-1).view.text.startsWith("tool result: ");
  await until(() => settled(a, viewsA) && settled(b, viewsB, true) && settled(c, viewsC), 8000, "all three tabs to show the finished tool turn").catch((error) => {
    throw Object.assign(error, { details: { sender: viewsA.log.at(-1), observer: viewsB.log.at(-1), reload: viewsC.log.at(-1) } });
  });
  observed.sender = a.snapshot();
  observed.observer = b.snapshot();
  observed.reload = c.snapshot();
  observed.views = { sender: viewsA.log, observer: viewsB.log, reload: viewsC.log };
  for (const tab of [a, b, c]) {
    noClientError(tab);
    noUnexpectedClose(tab);
  }
  // The wire: every yield as a preliminary output, in order, then the final output.
  const req = sentRequests(a.label)[0];
  const serverId = requireServerStart(a.label, req.id);
  const chunks = chunksOf(a.label, req.id);
  const call = chunks.find((c) => c.type === "tool-input-available");
  check(call?.toolName === "getWeather" && deepEqual(call.input, { city: "Paris" }), "the turn did not call getWeather({city: \"Paris\"})", { chunks: chunks.map((c) => c.type) });
  const outputs = chunks.filter((c) => c.type === "tool-output-available" && c.toolCallId === call.toolCallId);
  observed.wireOutputs = outputs.map((c) => ({ output: c.output, preliminary: c.preliminary }));
  const last = outputs.at(-1);
  const preliminary = outputs.slice(0, -1);
  check(
    last && last.preliminary !== true && deepEqual(last.output, LIVE_FINAL),
    "the last tool-output-available is not the final output (no preliminary flag, the last yield)",
    { outputs: observed.wireOutputs },
  );
  check(
    preliminary.every((c) => c.preliminary === true) &&
      deepEqual(preliminary.slice(0, LIVE_PRELIMINARY.length).map((c) => c.output), LIVE_PRELIMINARY) &&
      preliminary.slice(LIVE_PRELIMINARY.length).every((c) => deepEqual(c.output, LIVE_FINAL)),
    "the yields did not stream as preliminary: true outputs, in order, before the final one",
    { outputs: observed.wireOutputs },
  );
  const finalIndex = chunks.indexOf(last);
  check(
    !chunks.slice(0, finalIndex).some((c) => c.type === "text-delta"),
    "the model's answer streamed before the tool's final output",
    { chunks: chunks.map((c) => c.type) },
  );
  // What each tab showed while the turn ran, and at the end.
  const turnDone = doneFrame(a, req.id);
  observed.sender.live = checkLiveToolViews("the sender", viewsA.log, (e) => e.status === "streaming");
  observed.observer.live = checkLiveToolViews("the observer tab", viewsB.log, (e) => e.seq <= logIndex(turnDone));
  const resumed = frameLog.some((e) => e.tab === c.label && e.dir === "in" && e.frame.type === MessageType.CF_AGENT_STREAM_RESUMING);
  check(resumed, "the tab loaded mid-stream was not offered the running stream (cf_agent_stream_resuming)");
  observed.reload.initialMessages = summary(c.initialMessages);
  observed.reload.live = checkLiveToolViews("the tab loaded mid-stream", viewsC.log, () => true, { requireAll: false });
  // The observer's accumulator keeps `preliminary: true` when the final chunk has none (agents
  // applyChunkToParts), and the hook merges that accumulator over the server's transcript
  // broadcast: a client-stack quirk (the reference wire is the same), recorded, not failed.
  observed.observer.finalPreliminaryFlag = liveToolView(b.messages).tool?.preliminary;
  for (const [who, tab, keptFlag] of [
    ["the sender", a, false],
    ["the observer tab", b, true],
    ["the tab loaded mid-stream", c, false],
  ]) {
    checkLiveTranscript(who, tab.messages, { keptFlag });
    check(tab.messages[1].id === serverId, `${who}'s assistant id ${tab.messages[1].id} is not the stream's ${serverId}`);
  }
  const history = await settledGet(urls[0], agent, name, (h) => h.length === 2 && textOf(h[1]).startsWith("tool result: "), "the finished tool turn");
  observed.get = summary(history);
  checkLiveTranscript("get-messages", history);
  check(sameTranscript(history, a.messages), "get-messages differs from the sender's state", { client: summary(a.messages), get: summary(history) });
  // A fresh client after the turn.
  const d = await mounted(urls[0], agent, name, { label: "fresh" });
  checkLiveTranscript("a fresh client", d.messages);
  check(sameTranscript(d.messages, a.messages), "a fresh client differs from the sender's state", { fresh: summary(d.messages), client: summary(a.messages) });
  for (const tab of [a, b, c]) {
    await holds(() => isFinalLiveTool(liveToolView(tab.messages).tool, { keptFlag: tab === b }) && idle(tab), 300, `${tab.label}'s final tool part`);
  }
}

/**
 * Custom data parts (compat-data-agent): `data-progress` updated in place by type + id, a
 * `data-note` with the same id but another type, `data-source` parts without an id (appended),
 * transient `data-status` parts (onData only). The sender (AbstractChat's stream, useChat's
 * onData), an observer tab on the other gateway (the hook's accumulator, the hook's onData), then
 * get-messages and a fresh client.
 */
async function dataPartsScenario({ urls, agent, name }, observed) {
  const viewsA = viewRecorder(dataView);
  const viewsB = viewRecorder(dataView);
  // What onData received, copied on receipt: the AI SDK keeps the chunk object as the message part
  // and later updates its `data` in place when a chunk with the same type + id arrives.
  const dataA = [];
  const dataB = [];
  const b = await mounted(urls.at(-1), agent, name, { label: "observer", onMessages: viewsB.onMessages, onData: (part) => dataB.push(structuredClone(part)) });
  const a = await mounted(urls[0], agent, name, { label: "sender", onMessages: viewsA.onMessages, onData: (part) => dataA.push(structuredClone(part)) });
  await withTimeout(a.send("report"), 10_000, "sendMessage(report) to finish");
  const req = sentRequests(a.label)[0];
  const serverId = requireServerStart(a.label, req.id);
  await until(() => idle(a) && idle(b) && deepEqual(dataView(b.messages).parts, DATA_FINAL) && dataB.length >= DATA_CHUNKS.length, 5000, "the observer tab to show the finished reply").catch(
    (error) => {
      throw Object.assign(error, { details: { sender: dataView(a.messages), observer: dataView(b.messages), dataB } });
    },
  );
  observed.sender = a.snapshot();
  observed.observer = b.snapshot();
  observed.views = { sender: viewsA.log, observer: viewsB.log };
  observed.onData = { sender: dataA, observer: dataB };
  for (const tab of [a, b]) {
    noClientError(tab);
    noUnexpectedClose(tab);
  }
  // The wire carries the chunks as the agent wrote them.
  const wire = chunksOf(a.label, req.id).filter((c) => c.type.startsWith("data-"));
  check(deepEqual(wire, DATA_CHUNKS), "the data chunks on the wire differ from what the agent wrote", { wire, expected: DATA_CHUNKS });
  checkDataChunksReceived("the sender", dataA);
  checkDataChunksReceived("the observer tab", dataB);
  observed.sender.progress = checkDataViews("the sender", viewsA.log);
  observed.observer.progress = checkDataViews("the observer tab", viewsB.log);
  for (const [who, tab] of [
    ["the sender", a],
    ["the observer tab", b],
  ]) {
    const messages = tab.messages;
    check(messages.length === 2 && messages[1].id === serverId, `${who} does not hold user + the assistant ${serverId}`, { messages: summary(messages) });
    check(deepEqual(dataPartsOf(messages[1]), DATA_FINAL), `${who}'s final data parts differ from the expected ones`, { parts: dataPartsOf(messages[1]), expected: DATA_FINAL });
  }
  const history = await settledGet(urls[0], agent, name, (h) => h.length === 2 && textOf(h[1]) === "Report done.", "the finished data reply");
  observed.get = history;
  check(history[1].id === serverId, `the persisted assistant id ${history[1].id} is not the stream's ${serverId}`);
  check(deepEqual(dataPartsOf(history[1]), DATA_FINAL), "get-messages holds other data parts than expected", { parts: dataPartsOf(history[1]), expected: DATA_FINAL });
  const stored = history[1].parts.filter((p) => p.type === "data-status" || "transient" in p);
  check(stored.length === 0, "get-messages holds transient data parts", { stored });
  const fresh = await mounted(urls.at(-1), agent, name, { label: "fresh" });
  check(deepEqual(dataPartsOf(fresh.messages.at(-1)), DATA_FINAL) && fresh.messages.length === 2, "a fresh client shows other data parts than expected", {
    messages: fresh.messages,
  });
  check(!fresh.messages.some((m) => m.parts.some((p) => p.type === "data-status")), "a fresh client shows a transient data part");
  for (const tab of [a, b]) await holds(() => deepEqual(dataPartsOf(tab.messages[1]), DATA_FINAL) && idle(tab), 300, `${tab.label}'s final data parts`);
}

const scenarios = {
  // Against a cluster that requires credentials: the real client without its token is refused at
  // the upgrade (the socket never opens) and its get-messages gets 401; with the token it chats.
  async "auth-refused"({ urls, agent, name }, observed) {
    check(AUTH_TOKEN, "auth-refused needs COMPAT_TOKEN (a cluster that requires credentials)");
    const bare = newTab(urls[0], agent, name, { label: "no-token", query: null, reconnectDelayMs: 200 });
    bare.connect();
    let errors = 0;
    bare.agent.addEventListener("error", () => errors++);
    await until(() => bare.closes >= 2, 8000, "the refused socket to be closed twice (a retry)");
    observed.closes = bare.closes;
    observed.errors = errors;
    check(bare.opens === 0, `the socket without a token opened ${bare.opens} time(s)`);
    check(!bare.receivedTypes.length, `frames reached the socket without a token: ${bare.receivedTypes}`);
    bare.agent.close();
    const refused = await fetch(`${urls[0]}/agents/${agent}/${name}/get-messages`);
    const body = await refused.json();
    observed.getMessages = { status: refused.status, code: body.code };
    check(refused.status === 401 && body.code === "missing_credentials", "get-messages without a token was not refused", body);
    const other = await fetch(`${urls[0]}/agents/${agent}/${name}-other/get-messages?token=${encodeURIComponent(AUTH_TOKEN)}`);
    check(other.status === 404, `the token reached another conversation (${other.status})`);
    const a = await mounted(urls[0], agent, name, { label: "with-token" });
    await withTimeout(a.send("hello world"), 10_000, "sendMessage to finish");
    check(textOf(a.messages[1]) === "echo: hello world", "the tab with its token did not chat");
  },

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

  // Branch views (durachat's own): a tab that names a branch in its URL (useAgent's `query`) loads,
  // chats on and reloads that branch only, and a tab on main never sees it.
  async "branch-view"({ urls, agent, name }, observed) {
    const main = await mounted(urls[0], agent, name);
    await withTimeout(main.send("one"), 10_000, "first sendMessage");
    await withTimeout(main.send("two"), 10_000, "second sendMessage");
    const mainBefore = summary(main.messages);
    const created = await fetch(`${urls[0]}/agents/${agent}/${name}/branches`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "alt", at: main.messages[1].id }),
    });
    const branch = await created.json();
    check(created.status === 201, `creating the branch answered ${created.status}`, { branch });
    const alt = await mounted(urls[0], agent, name, { label: "alt", query: { branch: "alt" } });
    check(
      alt.initialMessages.length === 2 && textOf(alt.initialMessages[1]) === "echo: one",
      "the branch tab did not load the branch's transcript",
      { initial: summary(alt.initialMessages) },
    );
    await withTimeout(alt.send("three"), 10_000, "sendMessage on the branch");
    check(
      JSON.stringify(alt.messages.map(textOf)) === JSON.stringify(["one", "echo: one", "three", "echo: three"]),
      "the branch tab does not show its branch",
      { alt: summary(alt.messages) },
    );
    await sleep(300);
    check(
      JSON.stringify(summary(main.messages)) === JSON.stringify(mainBefore),
      "the main tab changed while the other branch chatted",
      { main: summary(main.messages), before: mainBefore },
    );
    check(
      !frameLog.some((f) => f.tab === main.label && f.dir === "in" && JSON.stringify(f.frame).includes("echo: three")),
      "the main tab received frames of the other branch",
    );
    const reloaded = await mounted(urls[1], agent, name, { label: "alt-reload", query: { branch: "alt" } });
    check(
      JSON.stringify(reloaded.initialMessages.map(textOf)) === JSON.stringify(["one", "echo: one", "three", "echo: three"]),
      "a reload of the branch tab does not show its branch",
      { reloaded: summary(reloaded.initialMessages) },
    );
    const onMain = await getMessages(urls[0], agent, name);
    check(
      JSON.stringify(onMain.map(textOf)) === JSON.stringify(["one", "echo: one", "two", "echo: two"]),
      "main's stored transcript changed",
      { main: summary(onMain) },
    );
    observed.alt = summary(alt.messages);
    observed.main = summary(main.messages);
  },

  // Edit and regenerate with the real client: an edit (sendMessage({text, messageId})), a
  // regenerate, and a stop then regenerate each answer where the tab is (main), as the
  // reference does; what they replaced is kept on a new branch each. A reload without a branch
  // shows the tab's transcript, another tab on main receives it live, and a branch-aware tab
  // reaches every kept version through the siblings' branches.
  async "branch-edit"({ urls, agent, name }, observed) {
    const a = await mounted(urls[0], agent, name, { label: "editor" });
    await withTimeout(a.send("one"), 10_000, "first sendMessage");
    await withTimeout(a.send("two"), 10_000, "second sendMessage");
    const original = summary(a.messages);
    const watcher = await mounted(urls.at(-1), agent, name, { label: "main-watcher" });
    const branchOf = async (id) => getMessages(urls[0], agent, name, `?branch=${id}`);
    const sameAs = (messages, expected) => JSON.stringify(summary(messages)) === JSON.stringify(expected);
    const mainIs = async (expected, what) =>
      settledGet(urls[0], agent, name, (h) => sameAs(h, expected), what, 5000).catch((error) => {
        throw Object.assign(error, { details: { expected } });
      });
    const keptBranches = async () =>
      (await (await fetch(`${urls[0]}/agents/${agent}/${name}/branches`)).json()).branches.filter((b) => b.name !== "main");

    // 1. Edit "two" in place, as the AI SDK does: sendMessage({text, messageId}).
    await withTimeout(a.chat.sendMessage({ text: "two, edited", messageId: a.messages[2].id }), 10_000, "the edit");
    check(
      JSON.stringify(a.messages.map(textOf)) === JSON.stringify(["one", "echo: one", "two, edited", "echo: two, edited"]),
      "the editor does not show the edit",
      { editor: summary(a.messages) },
    );
    await mainIs(summary(a.messages), "main to show the edit");
    let kept = await keptBranches();
    check(kept.length === 1 && kept[0].name.startsWith("edit-"), "the edit kept no branch", { kept });
    check(sameAs(await branchOf(kept[0].id), original), "the kept branch is not the original conversation");
    await until(() => sameAs(watcher.messages, summary(a.messages)), 5000, "the tab on main to show the edit");

    // 2. Regenerate the last reply.
    const edited = summary(a.messages);
    await withTimeout(a.regenerate(), 10_000, "regenerate");
    check(a.messages.length === 4 && a.messages[3].id !== edited[3].id, "the regenerated reply is not new", { editor: summary(a.messages) });
    await mainIs(summary(a.messages), "main to show the regenerated reply");
    kept = await keptBranches();
    const regenerated = kept.find((b) => b.name.startsWith("regenerate-"));
    check(regenerated && sameAs(await branchOf(regenerated.id), edited), "the regenerate did not keep the replaced reply", { kept });

    // 3. Stop a streaming reply and regenerate it: the stopped partial is kept too.
    const sending = a.send("slow").catch((e) => a.errors.push(`send: ${e.message}`));
    await waitForDeltas(a, 5);
    await withTimeout(a.stop(), 5000, "stop");
    await withTimeout(sending, 10_000, "the stopped sendMessage to settle");
    await withTimeout(a.regenerate(), 30_000, "regenerate after stop");
    check(textOf(a.messages.at(-1)) === SLOW_TEXT, "the regenerated slow reply is not whole", { editor: summary(a.messages) });
    await mainIs(summary(a.messages), "main to show the regenerated slow reply");
    kept = await keptBranches();
    check(kept.length === 3, `${kept.length} kept branches, expected 3`, { kept });
    const stopped = await branchOf(kept[2].id);
    const partialText = textOf(stopped.at(-1));
    check(
      stopped.length === 6 && partialText.length > 0 && SLOW_TEXT.startsWith(partialText) && partialText !== SLOW_TEXT,
      "the stopped reply's partial is not kept",
      { kept: summary(stopped) },
    );

    // 4. Reloads without a branch show what the editor shows; the tab on main followed along
    // and was never moved.
    const reloaded = await mounted(urls.at(-1), agent, name, { label: "editor-reload" });
    check(sameAs(reloaded.initialMessages, summary(a.messages)), "a reload does not show the editor's transcript", {
      reloaded: summary(reloaded.initialMessages),
    });
    await until(() => sameAs(watcher.messages, summary(a.messages)), 5000, "the tab on main to show the editor's transcript");
    const switched = frameLog.filter((f) => f.dir === "in" && f.frame.type === "durachat_branch_switched");
    check(switched.length === 0, "a tab was moved to another branch", { switched: switched.slice(0, 3) });

    // 5. A branch-aware tab: the edited message's siblings say where the original is.
    const siblings = await (await fetch(`${urls[0]}/agents/${agent}/${name}/messages/${a.messages[2].id}/siblings`)).json();
    check(siblings.index === 1 && siblings.alternatives?.length === 2, "the edited message does not have two versions", { siblings });
    const first = siblings.alternatives[0].branch;
    const onOriginal = await mounted(urls[0], agent, name, { label: "original", query: { branch: first } });
    check(sameAs(onOriginal.initialMessages, original), "the first version's branch does not show the original", {
      original: summary(onOriginal.initialMessages),
    });
    observed.kept = kept.map((b) => b.name);
    observed.editor = summary(a.messages);
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
    // As the reference: the tab stays where it is, and main (what a reload without a branch
    // reads) ends with the new reply. The first reply is kept on a branch of its own.
    const moved = frameLog.find((f) => f.tab === a.label && f.dir === "in" && f.frame.type === "durachat_branch_switched");
    check(!moved, "the tab was moved to another branch", { moved });
    const serverId = requireServerStart(a.label, req.id);
    const history = await settledGet(
      urls[0],
      agent,
      name,
      (h) => h.length === 2 && h[1].role === "assistant" && h[1].id === serverId,
      "main to end with the regenerated reply",
    );
    observed.get = summary(history);
    check(textOf(history[1]) === "echo: hello world" && history[0].id === msgs[0].id, "main's transcript is wrong", { main: summary(history) });
    check(msgs[1].id === serverId, `client assistant id ${msgs[1].id} is not the stream's ${serverId}`);
    const reloaded = await mounted(urls[0], agent, name, { label: "reload" });
    check(sameTranscript(reloaded.initialMessages, msgs), "a reload does not show what the tab shows", {
      reloaded: summary(reloaded.initialMessages),
    });
    const listed = await (await fetch(`${urls[0]}/agents/${agent}/${name}/branches`)).json();
    const kept = listed.branches.find((b) => b.name.startsWith("regenerate-"));
    check(kept && kept.leaf_message_id === before[1].id, "the first reply is not kept on a branch", { listed });
    const old = await getMessages(urls[0], agent, name, `?branch=${kept.id}`);
    check(old.length === 2 && old[1].id === before[1].id, "the kept branch's transcript is wrong", { old: summary(old) });
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

  async "server-tool"({ urls, agent, name }, observed) {
    const a = await mounted(urls[0], agent, name, { onToolCall: answerGetLocation });
    await withTimeout(a.send("tool:Paris"), 10_000, "sendMessage(tool:Paris) to finish");
    await sleep(300);
    observed.tab = a.snapshot();
    noUnexpectedClose(a);
    check(a.status === "ready" && !a.chat.error, `status is ${a.status}`, { error: a.chat.error?.message, errors: a.errors });
    const req = sentRequests(a.label)[0];
    const serverId = requireServerStart(a.label, req.id);
    const chunks = chunksOf(a.label, req.id);
    observed.chunks = chunks.map((c) => c.type);
    const call = chunks.find((c) => c.type === "tool-input-available");
    check(call?.toolName === "getWeather" && deepEqual(call.input, { city: "Paris" }), "the turn did not call getWeather({city: \"Paris\"})", { chunks: observed.chunks, call });
    const out = chunks.find((c) => c.type === "tool-output-available" && c.toolCallId === call.toolCallId);
    check(out && deepEqual(out.output, WEATHER_PARIS), "the turn did not carry getWeather's output", { out });
    check(a.onToolCallInvocations.length === 0, "onToolCall ran for the server tool getWeather", { calls: a.onToolCallInvocations });
    const toolFrames = frameLog.filter((e) => e.dir === "out" && [MessageType.CF_AGENT_TOOL_RESULT, MessageType.CF_AGENT_TOOL_APPROVAL].includes(e.frame.type));
    check(toolFrames.length === 0, "the client sent tool frames for a server tool", { frames: toolFrames.map(renderFrame) });
    const expected = {
      userText: "tool:Paris",
      toolType: "tool-getWeather",
      state: "output-available",
      input: { city: "Paris" },
      output: WEATHER_PARIS,
      text: `tool result: ${JSON.stringify(WEATHER_PARIS)}`,
    };
    checkToolTurn(a.messages, { who: "the client", ...expected });
    check(a.messages[1].id === serverId, `client assistant id ${a.messages[1].id} is not the stream's ${serverId}`);
    const history = await settledGet(urls[0], agent, name, (h) => h.length === 2 && textOf(h[1]) === expected.text, "the finished tool turn");
    observed.get = summary(history);
    checkToolTurn(history, { who: "get-messages", ...expected });
    check(sameTranscript(history, a.messages), "get-messages differs from the client state", { client: summary(a.messages), get: summary(history) });
  },

  async "client-tool"({ urls, agent, name }, observed) {
    const a = await mounted(urls[0], agent, name, { onToolCall: answerGetLocation });
    const { serverId, toolCallId } = await clientToolRoundTrip(a, observed);
    observed.tab = a.snapshot();
    observed.wire = checkToolRoundTripWire(a.label, {
      frameType: MessageType.CF_AGENT_TOOL_RESULT,
      toolCallId,
      updatedState: "output-available",
      updatedOutput: LOCATION,
    });
    const sent = frameLog.find((e) => e.dir === "out" && e.frame.type === MessageType.CF_AGENT_TOOL_RESULT).frame;
    check(sent.toolName === "getLocation" && deepEqual(sent.output, LOCATION), "the tool result frame does not carry getLocation's output", { sent });
    check(a.status === "ready" && !a.chat.error, `status is ${a.status}`, { error: a.chat.error?.message, errors: a.errors });
    // The AI SDK client may briefly show a second assistant message while it applies the
    // continuation; the final state may not.
    observed.peakMessages = a.peakMessageCount;
    const expected = {
      userText: "client-tool:",
      toolType: "tool-getLocation",
      state: "output-available",
      input: {},
      output: LOCATION,
      text: CLIENT_TOOL_TEXT,
    };
    checkToolTurn(a.messages, { who: "the client", ...expected });
    check(a.messages[1].id === serverId, `the assistant id ${a.messages[1].id} is not the first turn's ${serverId}: the continuation did not land in the same message`);
    const history = await settledGet(urls[0], agent, name, (h) => h.length === 2 && textOf(h[1]) === CLIENT_TOOL_TEXT, "the finished client-tool turn");
    observed.get = summary(history);
    checkToolTurn(history, { who: "get-messages", ...expected });
    check(sameTranscript(history, a.messages), "get-messages differs from the client state", { client: summary(a.messages), get: summary(history) });
  },

  async approve(ctx, observed) {
    await approvalScenario(ctx, observed, true);
  },

  async reject(ctx, observed) {
    await approvalScenario(ctx, observed, false);
  },

  async "tool-two-tabs"({ urls, agent, name }, observed) {
    const a = await mounted(urls[0], agent, name, { label: "tabA", onToolCall: answerGetLocation });
    // Tab B only watches (no onToolCall): the tool call is tab A's to answer.
    const b = await mounted(urls.at(-1), agent, name, { label: "tabB" });
    let bPeak = 0;
    const watch = setInterval(() => {
      bPeak = Math.max(bPeak, b.messages.length);
    }, 5);
    try {
      const { serverId, toolCallId } = await clientToolRoundTrip(a, observed);
      const expected = {
        userText: "client-tool:",
        toolType: "tool-getLocation",
        state: "output-available",
        input: {},
        output: LOCATION,
        text: CLIENT_TOOL_TEXT,
      };
      observed.tabA = a.snapshot();
      observed.wireA = checkToolRoundTripWire(a.label, {
        frameType: MessageType.CF_AGENT_TOOL_RESULT,
        toolCallId,
        updatedState: "output-available",
        updatedOutput: LOCATION,
      });
      checkToolTurn(a.messages, { who: "tab A", ...expected });
      check(a.messages[1].id === serverId, `tab A's assistant id ${a.messages[1].id} is not the first turn's ${serverId}`);
      const converged = await until(
        () => sameTranscript(b.messages, a.messages) && b.status === "ready" && !b.isServerStreaming,
        5000,
        "tab B to show tab A's final messages",
      ).catch((error) => error);
      await sleep(300);
      observed.tabA = a.snapshot();
      observed.tabB = b.snapshot();
      observed.tabBPeakMessages = bPeak;
      noUnexpectedClose(b);
      if (converged instanceof Error) throw Object.assign(converged, { details: { a: summary(a.messages), b: summary(b.messages) } });
      checkToolTurn(b.messages, { who: "tab B", ...expected });
      check(sameTranscript(b.messages, a.messages), "tab B diverged from tab A after settling", { a: summary(a.messages), b: summary(b.messages) });
      check(b.status === "ready" && !b.isServerStreaming, `tab B is ${b.status} (isServerStreaming ${b.isServerStreaming})`);
      // Tab B observed the round trip: the first turn live, the tool result, the continuation live.
      const firstReq = sentRequests(a.label)[0];
      check(responseFrames(b.label, firstReq.id).some((e) => parsedChunk(e.frame)?.type === "tool-input-available"), "tab B never received the first turn's tool call chunks");
      const bUpdates = frameLog.filter(
        (e) =>
          e.tab === b.label &&
          e.dir === "in" &&
          e.frame.type === MessageType.CF_AGENT_MESSAGE_UPDATED &&
          e.frame.message?.parts?.some((p) => p.toolCallId === toolCallId && p.state === "output-available"),
      );
      check(bUpdates.length >= 1, "tab B never received the cf_agent_message_updated with tab A's tool result");
      const contFrames = responseFrames(b.label, observed.wireA.continuationId);
      observed.tabBContinuationFrames = contFrames.length;
      check(contFrames.some((e) => parsedChunk(e.frame)?.type === "text-delta"), "tab B never received the continuation's chunks live");
      check(contFrames.every((e) => e.frame.continuation === true), "continuation frames reached tab B without continuation:true", {
        frames: contFrames.filter((e) => e.frame.continuation !== true).slice(0, 5).map(renderFrame),
      });
      const bToolFrames = frameLog.filter(
        (e) => e.tab === b.label && e.dir === "out" && [MessageType.CF_AGENT_TOOL_RESULT, MessageType.CF_AGENT_TOOL_APPROVAL].includes(e.frame.type),
      );
      check(bToolFrames.length === 0, "tab B sent tool frames");
      const history = await settledGet(urls[0], agent, name, (h) => h.length === 2 && textOf(h[1]) === CLIENT_TOOL_TEXT, "the finished client-tool turn");
      observed.get = summary(history);
      checkToolTurn(history, { who: "get-messages", ...expected });
      check(sameTranscript(history, a.messages), "get-messages differs from the clients' state", { client: summary(a.messages), get: summary(history) });
    } finally {
      clearInterval(watch);
    }
  },

  // Preliminary tool results (docs/agents.md#server-tools): compat-live-tool-agent.
  async preliminary(ctx, observed) {
    await preliminaryScenario(ctx, observed);
  },

  // Custom data parts (docs/agents.md#data-parts): compat-data-agent.
  async "data-parts"(ctx, observed) {
    await dataPartsScenario(ctx, observed);
  },

  // messageConcurrency (docs/agents.md#message_concurrency): latest-agent, merge-agent, debounce-agent, drop-agent.
  async "concurrency-latest"(ctx, observed) {
    await supersedeScenario(ctx, observed, "latest");
  },

  async "concurrency-merge"(ctx, observed) {
    await mergeScenario(ctx, observed);
  },

  async "concurrency-debounce"(ctx, observed) {
    await supersedeScenario(ctx, observed, "debounce");
  },

  async "concurrency-drop"(ctx, observed) {
    await dropScenario(ctx, observed);
  },
};

// The AI SDK's own HTTP transport (DefaultChatTransport + AbstractChat): aisdk.mjs.
Object.assign(
  scenarios,
  aisdkScenarios({
    Chat,
    check,
    until,
    withTimeout,
    textOf,
    summary,
    getMessages,
    mounted,
    sleep,
    SLOW_TEXT,
    LOCATION,
    PAID_BOB,
    frameLog,
  }),
);

/** The agent a scenario talks to when none is given: the demo agent, or the test agent it needs. */
const SCENARIO_AGENTS = {
  preliminary: "compat-live-tool-agent",
  "data-parts": "compat-data-agent",
  "concurrency-latest": "latest-agent",
  "concurrency-merge": "merge-agent",
  "concurrency-debounce": "debounce-agent",
  "concurrency-drop": "drop-agent",
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
  const agent = agentArg || SCENARIO_AGENTS[scenario] || "chat-agent";
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
