"""Text in and out of the model: the tokenizer, chat templates, grammars, tool calls, reasoning
(thinking) blocks, the reranker's prompt format, and the streamed tail held back (`holdback`).
Nothing here imports the model, the runtime or the drivers."""
