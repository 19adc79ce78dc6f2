"""The chat view: the open conversation, its messages, the input box and the chat list.

Owns: `conversation.Conversation` (the open chat's MessageModel, sending, streaming, stop,
regenerate, edit-and-resend), the message widgets (`message_view`, `bubbles`, `thinking_block`,
`tool_block`, `markdown_text`, `code_highlight`), the input (`message_input`, `attachment_bar`,
`attachments`, `draft_tokens`), the versions of a reply (`reply_versions`) and the chat list
(`chat_sidebar`).

Signals: Conversation.generatingChanged(bool), replyFinished(dict), replyFailed(str),
chatCreated(Chat), chatChanged(int), storageFailed(str), storageRecovered(str);
ChatSidebar.chatSelected(int), newChatRequested(), deleteRequested(int), storageFailed(str);
MessageView.editRequested(int), regenerateRequested(), versionRequested(int);
MessageInput.sendRequested(), filesDropped(list), focusChanged(bool);
AttachmentBar.changed(), refused(str); DraftTokens.verdictChanged(str).

May import: `store/` (chats, item models), `tools/tool_flow` (a reply's tool calls),
`servers/remote_source` (a remote reply's tool calls), the top-level `worker`, `chat_source`,
`elided_label`; from the engine its chat rules
(`engine/chat/`). Never `library/`, `presets/` or the window.
"""
