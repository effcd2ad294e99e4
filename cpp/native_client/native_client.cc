// ngram_service._native_client: one unary call of the NgramService from
// Python over grpc++ (PruneTree and ProposeTree), bytes in and bytes out, the GIL released for the whole call. Built beside
// the server where grpc++ is installed (cpp/server/CMakeLists.txt); where it
// is not, or the worker lacks the libraries, importing it fails and
// NgramClient keeps to grpcio. The request and response stay serialized
// protobuf (proto/ngram/v1/ngram.proto): this module knows no message.
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/impl/rpc_method.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace py = pybind11;

namespace {

PyObject* g_rpc_failure = nullptr;  // _native_client.RpcFailure(code: int, details: str)

// One channel to one target: TLS when root certificates, a key or a
// certificate chain are given (or tls is set), else plaintext; the channel
// arguments as grpcio's options (integers and strings).
class Channel {
 public:
  Channel(const std::string& target, const std::vector<std::pair<std::string, py::object>>& options, bool tls,
          const std::string& root_certificates, const std::string& private_key, const std::string& certificate_chain,
          const std::string& method)
      : method_name_(method), method_(method_name_.c_str(), grpc::internal::RpcMethod::NORMAL_RPC) {
    grpc::ChannelArguments args;
    for (const auto& [key, value] : options) {
      if (py::isinstance<py::bool_>(value) || py::isinstance<py::int_>(value))
        args.SetInt(key, value.cast<int>());
      else if (py::isinstance<py::str>(value))
        args.SetString(key, value.cast<std::string>());
      else
        throw py::value_error("channel option " + key + ": only integers and strings, got " +
                              std::string(py::repr(value)));
    }
    std::shared_ptr<grpc::ChannelCredentials> creds;
    if (tls) {
      grpc::SslCredentialsOptions o;
      o.pem_root_certs = root_certificates;
      o.pem_private_key = private_key;
      o.pem_cert_chain = certificate_chain;
      creds = grpc::SslCredentials(o);
    } else {
      creds = grpc::InsecureChannelCredentials();
    }
    channel_ = grpc::CreateCustomChannel(target, creds, args);
  }

  // One unary call with a deadline `timeout` seconds from now.
  py::bytes call(const py::bytes& request, double timeout) {
    char* data = nullptr;
    Py_ssize_t size = 0;
    if (PyBytes_AsStringAndSize(request.ptr(), &data, &size) != 0) throw py::error_already_set();
    grpc::Slice slice(data, static_cast<size_t>(size));  // a copy: the GIL goes below
    grpc::ByteBuffer req(&slice, 1), resp;
    grpc::Status status;
    {
      py::gil_scoped_release nogil;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::duration_cast<std::chrono::system_clock::duration>(
                           std::chrono::duration<double>(timeout)));
      status = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(channel_.get(), method_, &ctx,
                                                                                      req, &resp);
    }
    if (!status.ok()) {
      PyErr_SetObject(g_rpc_failure,
                      py::make_tuple(static_cast<int>(status.error_code()), status.error_message()).ptr());
      throw py::error_already_set();
    }
    std::vector<grpc::Slice> slices;
    if (!resp.Dump(&slices).ok()) throw std::runtime_error("unreadable response buffer");
    size_t total = 0;
    for (const auto& s : slices) total += s.size();
    PyObject* out = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(total));
    if (!out) throw py::error_already_set();
    char* w = PyBytes_AS_STRING(out);
    for (const auto& s : slices) {
      std::memcpy(w, s.begin(), s.size());
      w += s.size();
    }
    return py::reinterpret_steal<py::bytes>(out);
  }

  // Whether the channel is connected, waiting at most `timeout` seconds for it.
  bool wait_ready(double timeout) {
    py::gil_scoped_release nogil;
    return channel_->WaitForConnected(std::chrono::system_clock::now() +
                                      std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                          std::chrono::duration<double>(timeout)));
  }

 private:
  std::string method_name_;  // outlives method_, which points into it
  grpc::internal::RpcMethod method_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace

PYBIND11_MODULE(_native_client, m) {
  m.doc() = "A unary NgramService call over grpc++ (see ngram_service.native_client).";
  g_rpc_failure = PyErr_NewException("ngram_service._native_client.RpcFailure", PyExc_RuntimeError, nullptr);
  m.attr("RpcFailure") = py::handle(g_rpc_failure);
  py::class_<Channel>(m, "Channel")
      .def(py::init<const std::string&, const std::vector<std::pair<std::string, py::object>>&, bool,
                    const std::string&, const std::string&, const std::string&, const std::string&>(),
           py::arg("target"), py::arg("options"), py::arg("tls"), py::arg("root_certificates"),
           py::arg("private_key"), py::arg("certificate_chain"), py::arg("method"))
      .def("call", &Channel::call, py::arg("request"), py::arg("timeout"),
           "One unary call of the channel's method: serialized request in, serialized response out; "
           "RpcFailure(code, details) on any status but OK.")
      .def("wait_ready", &Channel::wait_ready, py::arg("timeout"));
}
