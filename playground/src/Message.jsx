// One message: its text, its tool calls (approval buttons, client-tool answers), an edit box
// for the user's messages, and the `< n / m >` picker that views a sibling's branch.
import { useState } from "react";

function textOf(message) {
  return message.parts
    .filter((part) => part.type === "text")
    .map((part) => part.text)
    .join("");
}

function isTool(part) {
  return part.type.startsWith("tool-") || part.type === "dynamic-tool";
}

function Picker({ siblings, onBranch }) {
  if (!siblings || siblings.siblings.length < 2) return null;
  const { index, alternatives } = siblings;
  const go = (to) => alternatives[to]?.branch && onBranch(alternatives[to].branch);
  return (
    <span className="picker" data-testid="picker">
      <button type="button" data-testid="prev" disabled={index === 0 || !alternatives[index - 1]?.branch} onClick={() => go(index - 1)}>
        ‹
      </button>
      <span data-testid="position">
        {index + 1} / {alternatives.length}
      </span>
      <button
        type="button"
        data-testid="next"
        disabled={index === alternatives.length - 1 || !alternatives[index + 1]?.branch}
        onClick={() => go(index + 1)}
      >
        ›
      </button>
    </span>
  );
}

function ToolCall({ part, busy, onApprove, onToolOutput }) {
  const [answer, setAnswer] = useState('{"lat": 48.85, "lon": 2.35}');
  const name = part.type === "dynamic-tool" ? part.toolName : part.type.slice("tool-".length);
  return (
    <div className="tool" data-testid="tool" data-state={part.state}>
      <code>
        {name}({JSON.stringify(part.input ?? {})})
      </code>{" "}
      <em>{part.state}</em>
      {part.output !== undefined && <pre>{JSON.stringify(part.output)}</pre>}
      {part.state === "approval-requested" && (
        <span className="actions">
          <button type="button" data-testid="approve" onClick={() => onApprove(part.approval.id, true)}>
            approve
          </button>
          <button type="button" data-testid="reject" onClick={() => onApprove(part.approval.id, false)}>
            reject
          </button>
        </span>
      )}
      {part.state === "input-available" && !part.providerExecuted && !busy && (
        <form
          className="actions"
          onSubmit={(event) => {
            event.preventDefault();
            try {
              onToolOutput(part, JSON.parse(answer));
            } catch {
              onToolOutput(part, answer);
            }
          }}
        >
          <input data-testid="tool-output" value={answer} onChange={(e) => setAnswer(e.target.value)} />
          <button type="submit" data-testid="tool-answer">
            answer
          </button>
        </form>
      )}
    </div>
  );
}

export function Message({ message, siblings, busy, onBranch, onEdit, onApprove, onToolOutput }) {
  const [editing, setEditing] = useState(null);
  return (
    <li className={`message ${message.role}`} data-testid="message" data-role={message.role}>
      <div className="meta">
        <span className="role">{message.role === "user" ? "you" : message.role}</span>
        <Picker siblings={siblings} onBranch={onBranch} />
        {message.role === "user" && editing === null && !busy && (
          <button type="button" data-testid="edit" onClick={() => setEditing(textOf(message))}>
            edit
          </button>
        )}
      </div>
      {editing !== null ? (
        <form
          className="edit"
          onSubmit={(event) => {
            event.preventDefault();
            onEdit(editing);
            setEditing(null);
          }}
        >
          <input data-testid="edit-input" value={editing} onChange={(e) => setEditing(e.target.value)} />
          <button type="submit" data-testid="edit-save">
            save and answer again
          </button>
          <button type="button" onClick={() => setEditing(null)}>
            cancel
          </button>
        </form>
      ) : (
        <>
          <div className="text" data-testid="text">
            {textOf(message)}
          </div>
          {message.parts.filter(isTool).map((part) => (
            <ToolCall key={part.toolCallId} part={part} busy={busy} onApprove={onApprove} onToolOutput={onToolOutput} />
          ))}
        </>
      )}
    </li>
  );
}
