/* The Agent Ops chat as a widget on another page:
 *
 *   <div id="agentops-chat"></div>
 *   <script src="https://ops.example.com/static/js/embed.js"
 *           data-target="#agentops-chat" data-height="640" async></script>
 *
 * It adds an iframe of /chat/embed/ from the origin the script came from. That origin
 * only lets itself be framed by the pages listed in CHAT_EMBED_ALLOWED_ORIGINS.
 */
(function () {
  "use strict";
  var script = document.currentScript;
  if (!script) return;
  var origin = new URL(script.src, location.href).origin;
  var frame = document.createElement("iframe");
  frame.src = origin + "/chat/embed/";
  frame.title = "Support assistant";
  frame.loading = "lazy";
  frame.setAttribute("allow", "clipboard-write");
  frame.style.width = "100%";
  frame.style.maxWidth = script.getAttribute("data-width") || "480px";
  frame.style.height = (parseInt(script.getAttribute("data-height"), 10) || 640) + "px";
  frame.style.border = "1px solid #e3e6eb";
  frame.style.borderRadius = "8px";
  var selector = script.getAttribute("data-target");
  var target = selector ? document.querySelector(selector) : null;
  if (target) {
    target.appendChild(frame);
  } else {
    script.insertAdjacentElement("afterend", frame);
  }
})();
