# The worker: Temporal activities and workflows whose tool calls go through the ledger.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY . .
RUN pip install '.[postgres,http]' \
    && useradd --create-home --uid 10001 worker
USER worker

# docker-compose.yml passes --address and --ledger; see `python worker.py --help`.
CMD ["python", "worker.py"]
