"""The peer: a Gradio page of the kind PrivateGPT ships (a chat box, a file upload) plus a stats panel refreshed
every 3 s (a gr.Timer), as our Overview is. Run in its own virtual environment (Gradio pins its own Starlette):
`python peer_app.py PORT`. Answers are an echo: the benchmark measures the page, not a model."""
import os
import sys
import time

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402

STARTED = time.time()


def respond(message, history):
    return f"echo: {message}"


def stats():
    return {"uptime_s": round(time.time() - STARTED, 1), "engines": {"small": "up", "large": "up"}}


with gr.Blocks(title="peer console") as demo:
    gr.ChatInterface(respond)
    gr.File(file_count="multiple", label="Upload files")
    panel = gr.JSON(label="Stats")
    gr.Timer(3).tick(stats, outputs=panel)

demo.launch(server_name="127.0.0.1", server_port=int(sys.argv[1]), share=False, inbrowser=False, quiet=True)
