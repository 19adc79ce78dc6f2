"""The chat view: the open conversation, its messages, the input box and the chat list."""
