"""The edges: every module here talks to something outside the process (Triton, the model store, the
Kubernetes API, Alertmanager, an OpenTelemetry collector, a listening socket, a child process) and
decides nothing. The floors above call them; healer.core never does."""
