"""A second, independent client of the runtime API: OpenAI's Python library (openai 2.24.0,
hash-locked in scripts/hermes/requirements.lock, run from the Hermes virtualenv `make deps`
installs). hostapp/python_test.go runs it against a live function host and agent.

Environment: PA_BASE_URL (…/api/v1/), PA_KEY (a runtime key), PA_USER (the app's user).
Prints "ok" and exits 0 when every check holds; any failure raises."""

import os
import time

import openai
from openai import OpenAI


def main() -> None:
    c = OpenAI(base_url=os.environ["PA_BASE_URL"], api_key=os.environ["PA_KEY"],
               default_headers={"X-App-User": os.environ["PA_USER"]}, max_retries=0, timeout=20)

    def wait(rid: str, *statuses: str):
        deadline = time.monotonic() + 30
        while True:
            r = c.responses.retrieve(rid)
            if r.status in statuses:
                return r
            assert time.monotonic() < deadline, f"{rid} stayed {r.status}"
            time.sleep(0.1)

    # Basic response, background mode, metadata kept.
    r1 = c.responses.create(model="chat", input="hello from python", background=True, metadata={"ticket": "P-7"})
    assert r1.status == "queued", r1.status
    assert r1.id.startswith("resp_"), r1.id
    assert r1.previous_response_id is None
    assert r1.metadata == {"ticket": "P-7"}, r1.metadata
    assert r1.completed_at is None
    done = wait(r1.id, "completed")
    assert done.output_text == "You said: hello from python", done.output_text
    assert done.completed_at is not None and done.completed_at >= done.created_at
    assert done.usage is not None and done.usage.total_tokens == done.usage.input_tokens + done.usage.output_tokens
    assert done.usage.input_tokens_details.cached_tokens == 0

    # Multi-turn with previous_response_id; input items list what was asked.
    r2 = c.responses.create(model="chat", input=[{"role": "user", "content": "second turn"}],
                            previous_response_id=r1.id, background=True)
    assert r2.previous_response_id == r1.id
    done2 = wait(r2.id, "completed")
    assert done2.output_text == "You said: second turn", done2.output_text
    assert done2.previous_response_id == r1.id
    items = c.responses.input_items.list(r2.id)
    assert [i.role for i in items.data] == ["user"], items
    assert items.data[0].content[0].text == "second turn"

    # Errors: OpenAI's types with type, param and code.
    try:
        c.responses.retrieve("resp_rmissing0")
        raise AssertionError("a missing response was found")
    except openai.NotFoundError as e:
        assert e.type == "invalid_request_error", e.type
        assert e.code == "not_found", e.code
    try:
        c.responses.create(model="chat", input="x", background=True, metadata={"k": "v" * 513})
        raise AssertionError("a 513-character metadata value was accepted")
    except openai.BadRequestError as e:
        assert e.param == "metadata", e.param
    # A streamed retrieve is refused plainly, never read as an empty stream.
    try:
        for _ in c.responses.retrieve(r1.id, stream=True):
            pass
        raise AssertionError("retrieve(stream=True) yielded nothing and raised nothing")
    except openai.BadRequestError as e:
        assert e.param == "stream", e.param

    # Cancel a running response: it answers the outcome (or, past the bound, reaches it).
    long = c.responses.create(model="chat", input="tell a #long story", background=True)
    wait(long.id, "in_progress")
    cancelled = c.responses.cancel(long.id)
    if cancelled.status != "cancelled":
        assert cancelled.status == "in_progress", cancelled.status
        wait(long.id, "cancelled")

    # Delete: the chain is gone.
    c.responses.delete(r2.id)
    for rid in (r1.id, r2.id):
        try:
            c.responses.retrieve(rid)
            raise AssertionError(f"{rid} is readable after its deletion")
        except openai.NotFoundError:
            pass
    assert c.responses.retrieve(long.id).status == "cancelled"
    print("ok")


if __name__ == "__main__":
    main()
