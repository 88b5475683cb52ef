// Swagger UI's setup for /docs, from a file rather than an inline script: the dashboard's
// Content-Security-Policy allows only its own script files ("script-src 'self'").
"use strict";
window.addEventListener("DOMContentLoaded", () => {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json", dom_id: "#swagger-ui", layout: "BaseLayout", deepLinking: true,
    showExtensions: true, showCommonExtensions: true, validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
  });
});
