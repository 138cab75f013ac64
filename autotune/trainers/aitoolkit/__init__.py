"""ai-toolkit (ostris/ai-toolkit): its adapter."""
