// The AI SDK's own useChat transport against durachat: the real `ai` package's
// `DefaultChatTransport` (HTTP + Server-Sent Events) driving `AbstractChat`, as `useChat` does
// with `new DefaultChatTransport({api: "<base>/v1/agents/<agent>/chat"})` and
// `useChat({id: "<conversation>", resume: true})`. The scenarios are registered by driver.mjs,
// which hands over its helpers (the in-memory Chat, the WebSocket tabs, checks and waits).

import {
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
} from "ai";

export function aisdkScenarios(h) {
  const { Chat, check, until, withTimeout, textOf, summary, getMessages, mounted, sleep } = h;
  const { SLOW_TEXT, LOCATION, PAID_BOB, frameLog } = h;
  const texts = (messages) => messages.map(textOf);
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

  /** What `useChat({id, messages, transport, resume})` builds, minus React. */
  function httpChat(baseUrl, agent, name, { messages = [], onToolCall, automatic = false, body, query = "" } = {}) {
    const transport = new DefaultChatTransport({ api: `${baseUrl}/v1/agents/${agent}/chat${query}`, ...(body ? { body } : {}) });
    const chat = new Chat({
      id: name,
      messages,
      transport,
      onChange: () => {},
      ...(onToolCall ? { onToolCall: (options) => onToolCall(chat, options) } : {}),
      ...(automatic
        ? {
            sendAutomaticallyWhen: (options) =>
              lastAssistantMessageIsCompleteWithToolCalls(options) || lastAssistantMessageIsCompleteWithApprovalResponses(options),
          }
        : {}),
    });
    return chat;
  }

  async function settled(chat, what, timeoutMs = 15_000) {
    await until(() => chat.status === "ready" || chat.status === "error", timeoutMs, what);
    check(chat.status === "ready" && !chat.error, `${what}: the chat is ${chat.status}`, { error: chat.error?.message });
  }

  async function storedAs(baseUrl, agent, name, expected, query = "") {
    let last;
    const deadline = Date.now() + 5000;
    for (;;) {
      last = await getMessages(baseUrl, agent, name, query);
      if (same(texts(last), expected)) return last;
      if (Date.now() > deadline) check(false, `get-messages${query} does not show ${JSON.stringify(expected)}`, { stored: summary(last) });
      await sleep(50);
    }
  }

  return {
    // Chat over HTTP; a WebSocket tab sees it live; regenerate and edit keep the conversation's
    // main showing what the client shows; a branch through the transport's body.
    async "aisdk-chat"({ urls, agent, name }, observed) {
      const tab = await mounted(urls.at(-1), agent, name, { label: "ws-tab" });
      const chat = httpChat(urls[0], agent, name);
      await withTimeout(chat.sendMessage({ text: "hello there" }), 10_000, "sendMessage over HTTP");
      await settled(chat, "the first reply");
      check(same(texts(chat.messages), ["hello there", "echo: hello there"]), "the HTTP chat does not show the reply", {
        chat: summary(chat.messages),
      });
      const stored = await storedAs(urls[0], agent, name, ["hello there", "echo: hello there"]);
      check(stored[1].id === chat.messages[1].id, "the stored reply has another id than the streamed one");
      // The WebSocket tab saw the turn live and holds the same transcript.
      const live = frameLog.filter((f) => f.tab === tab.label && f.dir === "in" && f.frame.type === "cf_agent_use_chat_response" && /text-delta/.test(f.frame.body ?? ""));
      check(live.length > 0, "the WebSocket tab never saw the HTTP turn's chunks");
      await until(() => same(summary(tab.messages), summary(chat.messages)), 5000, "the WebSocket tab to show the HTTP chat's transcript");

      // Regenerate: main ends with the new reply (as the reference), the old one stays on a branch.
      const before = chat.messages[1].id;
      await withTimeout(chat.regenerate(), 10_000, "regenerate over HTTP");
      await settled(chat, "the regenerated reply");
      check(chat.messages.length === 2 && chat.messages[1].id !== before, "regenerate did not replace the reply", { chat: summary(chat.messages) });
      const regenerated = await storedAs(urls[0], agent, name, ["hello there", "echo: hello there"]);
      check(regenerated[1].id === chat.messages[1].id, "main does not end with the regenerated reply", { stored: summary(regenerated) });
      await until(() => same(summary(tab.messages), summary(chat.messages)), 5000, "the WebSocket tab to show the regenerated reply");

      // Edit the first message, as useChat does (sendMessage with its messageId).
      await withTimeout(chat.sendMessage({ text: "hello again", messageId: chat.messages[0].id }), 10_000, "the edit over HTTP");
      await settled(chat, "the edited reply");
      await storedAs(urls[0], agent, name, ["hello again", "echo: hello again"]);
      const siblings = await (await fetch(`${urls[0]}/agents/${agent}/${name}/messages/${chat.messages[1].id}/siblings`)).json();
      check(siblings.siblings?.length === 1, "the edited reply has siblings of its own", { siblings });
      const roots = await (await fetch(`${urls[0]}/agents/${agent}/${name}/messages/${chat.messages[0].id}/siblings`)).json();
      check(roots.index === 1 && roots.alternatives?.length === 2 && roots.alternatives[1].branch === "main", "the edit's siblings do not point at main", { roots });
      const kept = roots.alternatives[0].branch;
      const old = await getMessages(urls[0], agent, name, `?branch=${kept}`);
      check(same(texts(old), ["hello there", "echo: hello there"]), "the kept branch does not hold the replaced messages", { old: summary(old) });

      // A chat on that branch (the transport's body names it); main does not change.
      const onBranch = httpChat(urls[0], agent, name, { messages: old, body: { branch: kept } });
      await withTimeout(onBranch.sendMessage({ text: "on the side" }), 10_000, "sendMessage on a branch");
      await settled(onBranch, "the reply on the branch");
      await storedAs(urls[0], agent, name, ["hello there", "echo: hello there", "on the side", "echo: on the side"], `?branch=${kept}`);
      await storedAs(urls[0], agent, name, ["hello again", "echo: hello again"]);

      // The wire: the UI message stream headers and the closing [DONE].
      const raw = await fetch(`${urls[0]}/v1/agents/${agent}/chat`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ id: name, messages: [...chat.messages, { id: "raw-1", role: "user", parts: [{ type: "text", text: "sure" }] }], trigger: "submit-message" }),
      });
      const text = await raw.text();
      check(raw.headers.get("x-vercel-ai-ui-message-stream") === "v1", "no x-vercel-ai-ui-message-stream: v1 header", { headers: Object.fromEntries(raw.headers) });
      check((raw.headers.get("content-type") ?? "").startsWith("text/event-stream"), "the response is not an event stream");
      check(text.endsWith("data: [DONE]\n\n") && text.includes('"text-delta"'), "the event stream does not stream a reply and end with [DONE]", { text: text.slice(-300) });
      observed.chat = summary(chat.messages);
      observed.siblings = roots;
    },

    // A dropped response does not cancel; a reload resumes the stream from its start; an explicit
    // stop does cancel, and the partial is what the client shows; nothing to resume answers 204.
    async "aisdk-resume"({ urls, agent, name }, observed) {
      const a = httpChat(urls[0], agent, name);
      const sending = a.sendMessage({ text: "slow" }).catch(() => {});
      await until(() => textOf(a.messages[1]).length >= 20, 10_000, "the slow reply to start streaming");
      await a.stop(); // aborts the fetch: a disconnect, not a cancel
      await sending;
      const seen = textOf(a.messages[1]);
      check(seen.length < SLOW_TEXT.length, "the reply ended before the drop");
      // The page reloads (through the other gateway): transcript from get-messages, then resume.
      const initial = await getMessages(urls.at(-1), agent, name);
      const b = httpChat(urls.at(-1), agent, name, { messages: initial });
      await withTimeout(b.resumeStream(), 20_000, "resumeStream to follow the reply to its end");
      await settled(b, "the resumed reply");
      check(same(texts(b.messages), ["slow", SLOW_TEXT]), "the resumed chat does not hold the whole reply exactly once", { b: summary(b.messages) });
      const stored = await storedAs(urls[0], agent, name, ["slow", SLOW_TEXT]);
      check(stored[1].id === b.messages[1].id, "the resumed reply has another id than the stored one");
      const none = await fetch(`${urls[0]}/v1/agents/${agent}/chat/${name}/stream`);
      check(none.status === 204, `resume with nothing streaming answered ${none.status}, expected 204`);

      // An explicit stop cancels.
      const sendingAgain = b.sendMessage({ text: "slow again" }).catch(() => {});
      await until(() => textOf(b.messages[3]).length >= 20, 10_000, "the second slow reply to start streaming");
      const stop = await fetch(`${urls.at(-1)}/v1/agents/${agent}/chat/${name}/stop`, { method: "POST" });
      const stopped = await stop.json();
      check(stop.ok && typeof stopped.stopped === "string", "the stop did not name the stream it stopped", { stopped });
      await withTimeout(sendingAgain, 10_000, "the stopped sendMessage to settle");
      await settled(b, "the stopped reply");
      const partial = textOf(b.messages[3]);
      check(partial.length > 0 && partial.length < SLOW_TEXT.length && SLOW_TEXT.startsWith(partial), "the stopped reply is not a partial", { partial });
      const kept = await storedAs(urls[0], agent, name, ["slow", SLOW_TEXT, "slow again", partial]);
      check(kept[3].id === b.messages[3].id, "the stored partial has another id than the client's");
      observed.partial = partial.length;
      observed.seenBeforeDrop = seen.length;
    },

    // Client tools (onToolCall + addToolOutput) and approvals (addToolApprovalResponse), each
    // followed by sendAutomaticallyWhen: the continuation streams into the same message.
    async "aisdk-tools"({ urls, agent, name }, observed) {
      const answer = (chat, { toolCall }) => {
        if (toolCall.toolName === "getLocation") chat.addToolOutput({ tool: "getLocation", toolCallId: toolCall.toolCallId, output: LOCATION });
      };
      const a = httpChat(urls[0], agent, name, { onToolCall: answer, automatic: true });
      await withTimeout(a.sendMessage({ text: "client-tool:" }), 10_000, "sendMessage(client-tool:)");
      const expected = `tool result: ${JSON.stringify(LOCATION)}`;
      await until(() => a.status === "ready" && textOf(a.messages.at(-1)) === expected, 15_000, "the client tool's continuation").catch((error) => {
        throw Object.assign(error, { details: { chat: summary(a.messages), status: a.status, error: a.error?.message } });
      });
      check(a.messages.length === 2, "the continuation did not land in the same assistant message", { chat: summary(a.messages) });
      const stored = await storedAs(urls[0], agent, name, ["client-tool:", expected]);
      check(stored[1].id === a.messages[1].id, "the stored reply has another id than the client's");

      const other = `${name}-approve`;
      const b = httpChat(urls[0], agent, other, { automatic: true });
      await withTimeout(b.sendMessage({ text: "approve:bob" }), 10_000, "sendMessage(approve:bob)");
      const part = await until(
        () => b.messages.at(-1)?.parts?.find((p) => p.type === "tool-processPayment" && p.state === "approval-requested"),
        5000,
        "the processPayment call to await approval",
      );
      await b.addToolApprovalResponse({ id: part.approval.id, approved: true });
      const paid = `tool result: ${JSON.stringify(PAID_BOB)}`;
      await until(() => b.status === "ready" && textOf(b.messages.at(-1)) === paid, 15_000, "the approved call's continuation").catch((error) => {
        throw Object.assign(error, { details: { chat: summary(b.messages), status: b.status, error: b.error?.message } });
      });
      check(b.messages.length === 2, "the approval's continuation did not land in the same message", { chat: summary(b.messages) });
      await storedAs(urls[0], agent, other, ["approve:bob", paid]);
      observed.clientTool = summary(a.messages);
      observed.approval = summary(b.messages);
    },
  };
}
