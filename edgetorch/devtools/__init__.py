"""Developer tools: checking and inspecting what the compiler and the runtime do. May import every package."""
