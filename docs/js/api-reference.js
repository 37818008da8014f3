// The API reference: Swagger UI over the schema the documentation build wrote from the code
// (api/openapi.json, docs_hooks/site.py). Read only: a static site has no API behind it, so
// "Try it out" is off; the running product serves an interactive copy at /api/v1/docs/.
(function () {
  "use strict";
  var root = document.getElementById("swagger-ui");
  if (!root || typeof window.SwaggerUIBundle !== "function") {
    return;
  }
  window.SwaggerUIBundle({
    url: root.getAttribute("data-schema"),
    dom_id: "#swagger-ui",
    deepLinking: true,
    docExpansion: "list",
    defaultModelsExpandDepth: 0,
    supportedSubmitMethods: [],
    validatorUrl: null,
  });
})();
